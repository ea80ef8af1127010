package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

// DrainRequest is the optional body of POST /v1/gpu-servers/{id}/drain. Without a body, or with
// move false, the drain only stops placement (instances stay until deleted); with move true the
// apiserver also plans a move of each instance to another GPU server (a drain that moves work).
type DrainRequest struct {
	Move bool `json:"move"`
}

// drainGPUServer is POST /v1/gpu-servers/{id}/drain: a plain drain answers the GPU server, a
// drain with {"move": true} answers the drain's status (GET .../drain).
func (s *Server) drainGPUServer(c *gin.Context) error {
	if err := require(c, authn.RoleOperator); err != nil {
		return err
	}
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req DrainRequest
	if err := bindOptional(c, &req); err != nil {
		return err
	}
	ctx := c.Request.Context()
	if !req.Move {
		if err := s.store.SetDaemonFlag(ctx, store.KindGPUServer, id, "drain"); err != nil {
			return err
		}
		g, err := s.store.GetGPUServer(ctx, id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, g)
		return nil
	}
	d, err := s.store.DrainMove(ctx, id)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, d)
	return nil
}

// bindOptional decodes the request's body into v when there is one (a drain's body is optional).
func bindOptional(c *gin.Context, v any) error {
	body, err := readBody(c)
	if err != nil || len(body) == 0 {
		return err
	}
	return decodeJSON(body, v)
}

// drainStatus answers GET .../{id}/drain (operator) with what read finds for the id.
func (s *Server) drainStatus(read func(context.Context, uuid.UUID) (any, error)) func(*gin.Context) error {
	return func(c *gin.Context) error {
		if err := require(c, authn.RoleOperator); err != nil {
			return err
		}
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		d, err := read(c.Request.Context(), id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, d)
		return nil
	}
}

// checkMoveReports validates the moves a heartbeat reports.
func checkMoveReports(f *fields, moves []api.MoveReport) {
	f.check(len(moves) <= 1000, "moves", "at most 1000")
	for i, m := range moves {
		_, err := uuid.Parse(m.MoveID)
		f.check(err == nil, fmt.Sprintf("moves[%d].move_id", i), "must be a move id")
		f.check(m.State == api.MoveMoving || m.State == api.MoveDone || m.State == api.MoveFailed,
			fmt.Sprintf("moves[%d].state", i), "must be moving, done or failed")
		f.check(len(m.Reason) <= 1024, fmt.Sprintf("moves[%d].reason", i), "at most 1024 characters")
		f.check(m.SessionsMoved >= 0 && m.SessionsMoved <= 100000, fmt.Sprintf("moves[%d].sessions_moved", i), "0-100000")
		f.check(m.BytesCopied < 1<<62 && m.BytesTotal < 1<<62, fmt.Sprintf("moves[%d].bytes_copied", i), "out of range")
		f.check(m.PauseMs >= 0 && !math.IsInf(m.PauseMs, 0) && !math.IsNaN(m.PauseMs), fmt.Sprintf("moves[%d].pause_ms", i),
			"must be a non-negative number")
	}
}

// gpuServerMoves applies the moves a GPU server reports and returns its open moves, each with a
// session token minted for its target. A report on a move that is not this server's is refused
// (logged; the rest apply), so a compromised gpuserverd cannot touch another server's moves.
func (s *Server) gpuServerMoves(c *gin.Context, id uuid.UUID, reports []api.MoveReport) ([]api.GPUServerMove, error) {
	ctx := c.Request.Context()
	for _, r := range reports {
		if _, err := s.store.ReportMove(ctx, id, r); err != nil {
			if errors.Is(err, store.ErrNotYourMove) {
				s.log.Warn("a GPU server reported on a move that is not its own", "gpu_server", id, "move", r.MoveID)
				continue
			}
			return nil, err
		}
	}
	open, err := s.store.OpenMoves(ctx, id)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []api.GPUServerMove
	for _, o := range open {
		tok, err := s.token(o.Placed, now)
		if err != nil {
			return nil, err
		}
		out = append(out, api.GPUServerMove{MoveID: o.ID.String(), InstanceID: o.Placed.ID.String(),
			TargetID: o.TargetID.String(), Target: o.Endpoint, Token: tok})
	}
	return out, nil
}
