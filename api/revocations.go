package api

import "time"

// GPU servers verify session tokens offline, so the apiserver tells each one which of its
// instances stopped or were deleted: their tokens must be refused and their sessions ended.
//
//	GET /v1/agent/gpu-server/revocations?known=VERSION&wait=DURATION
//
// answers the whole set (level-triggered: a GPU server that restarts or loses the connection
// just asks again). When the set's Version equals known, the answer waits up to wait (at most
// MaxRevocationWait) for a change, so a revocation reaches a polling GPU server within a second.

// MaxRevocationWait bounds a revocations long-poll.
const MaxRevocationWait = 25 * time.Second

// Revocations is the set of a GPU server's revoked instances.
type Revocations struct {
	Version   string            `json:"version"` // changes whenever the set does
	Instances []RevokedInstance `json:"instances"`
}

// RevokedInstance is an instance whose session tokens issued at or before RevokedAt are refused
// (a later token is of its next start). The list keeps it for one token lifetime.
type RevokedInstance struct {
	InstanceID string    `json:"instance_id"`
	RevokedAt  time.Time `json:"revoked_at"`
}
