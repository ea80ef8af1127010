package api

// The interactive serial console between the apiserver and hostd. The apiserver opens a
// WebSocket to the host's ConsoleURL + ConsolePath + instance id with
// "Authorization: Bearer <console grant>" (internal/consolegrant: signed by the apiserver for
// that instance on that host, used once). hostd's first frame is a text frame holding a
// ConsoleHello; when its Status is 200, binary frames follow both ways (the user's keystrokes
// to hostd, the guest's serial output back) until either side closes. Any other Status ends the
// connection.

// ConsolePath is the path under a host's ConsoleURL; the instance id follows it.
const ConsolePath = "/v1/console/"

// ConsoleHello is hostd's first frame on a console connection.
type ConsoleHello struct {
	Status int    `json:"status"` // an HTTP status: 200, or why not (404, 409, 501, 502)
	Detail string `json:"detail,omitempty"`
}
