package server

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"gpucloud/api"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

// HostDrainRequest is the optional body of POST /v1/hosts/{id}/drain. Without a body, or with
// move false, the drain only stops placement; with move true the apiserver also plans a move of
// each VM to another host: mode restart (stop, copy the disks, start on the target; the default)
// or live (libvirt live migration where both hosts allow it; fallback: restart where they don't).
type HostDrainRequest struct {
	Move     bool   `json:"move"`
	Mode     string `json:"mode,omitempty" doc:"restart (default) or live"`
	Fallback bool   `json:"fallback,omitempty" doc:"live only: restart a VM the hosts cannot live-migrate, instead of naming it unmoved"`
}

// drainHost is POST /v1/hosts/{id}/drain: a plain drain answers the host, a drain with
// {"move": true} answers the drain's status (GET .../drain).
func (s *Server) drainHost(c *gin.Context) error {
	if err := require(c, authn.RoleOperator); err != nil {
		return err
	}
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req HostDrainRequest
	if err := bindOptional(c, &req); err != nil {
		return err
	}
	var f fields
	f.check(req.Mode == "" || req.Mode == store.MoveRestart || req.Mode == store.MoveLive, "mode", "restart or live")
	f.check(req.Move || (req.Mode == "" && !req.Fallback), "move", "mode and fallback need move: true")
	f.check(!req.Fallback || req.Mode == store.MoveLive, "fallback", "only with mode live")
	if err := f.err(); err != nil {
		return err
	}
	ctx := c.Request.Context()
	if !req.Move {
		if err := s.store.SetDaemonFlag(ctx, store.KindHost, id, "drain"); err != nil {
			return err
		}
		h, err := s.store.GetHost(ctx, id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, h)
		return nil
	}
	if req.Mode == "" {
		req.Mode = store.MoveRestart
	}
	d, err := s.store.DrainHostMove(ctx, id, req.Mode, req.Fallback)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, d)
	return nil
}

// checkHostMoveReport validates a host's report on a move.
func checkHostMoveReport(r api.HostMoveReport) error {
	var f fields
	f.check(r.State == api.HostMoveReady || r.State == api.HostMoveCopying || r.State == api.HostMoveDone || r.State == api.HostMoveFailed,
		"state", "must be ready, copying, done or failed")
	f.check(len(r.Reason) <= 1024, "reason", "at most 1024 characters")
	f.check(r.BytesCopied >= 0 && r.BytesCopied < 1<<62, "bytes_copied", "0 to 2^62")
	f.check(r.BytesTotal >= 0 && r.BytesTotal < 1<<62, "bytes_total", "0 to 2^62")
	f.check(r.Observed == nil || r.State == api.HostMoveDone, "observed", "only with done")
	if err := f.err(); err != nil {
		return err
	}
	if r.Observed != nil {
		return checkObserved(*r.Observed)
	}
	return nil
}

// hostMoveReport is PUT /v1/agent/host/moves/{id}: a host's word on a move it takes part in. A
// report on another host's move is answered 404 and changes nothing, so a compromised hostd
// cannot move, finish or fail VMs it does not hold.
func (s *Server) hostMoveReport(c *gin.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var r api.HostMoveReport
	if err := bind(c, &r); err != nil {
		return err
	}
	if err := checkHostMoveReport(r); err != nil {
		return err
	}
	host := principal(c).DaemonID
	_, err = s.store.ReportHostMove(c.Request.Context(), host, id, r)
	var bad *store.ErrMoveReport
	switch {
	case errors.Is(err, store.ErrNotYourMove):
		s.log.Warn("a host reported on a move that is not its own", "host", host, "move", id)
		return notFound("no such move of this host")
	case errors.As(err, &bad):
		return problemf(http.StatusConflict, "invalid-state", "Invalid state", "%s", bad.Msg)
	case err != nil:
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}
