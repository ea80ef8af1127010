package cli

import (
	"context"
	"errors"

	"gpucloud/sdk"
)

// Exit codes scripts can rely on (docs/gpuctl.md).
const (
	ExitOK          = 0
	ExitError       = 1 // anything else
	ExitUsage       = 2 // bad flags, arguments or configuration
	ExitNotFound    = 3
	ExitAuth        = 4 // unauthenticated or forbidden (quota exceeded included)
	ExitInvalid     = 5 // validation failed or conflict with the current state
	ExitUnavailable = 6 // retryable: no capacity, overloaded, unreachable (after retries)
	ExitTimeout     = 7 // a --wait or drain ran out of time
)

// usageError is a mistake in how gpuctl was called.
type usageError struct{ error }

func usagef(err error) error { return usageError{err} }

// ExitCode maps an error to its exit code.
func ExitCode(err error) int {
	var u usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &u):
		return ExitUsage
	case errors.Is(err, context.DeadlineExceeded):
		return ExitTimeout
	case sdk.IsNotFound(err):
		return ExitNotFound
	case sdk.IsUnauthenticated(err), sdk.IsForbidden(err):
		return ExitAuth
	case sdk.IsValidation(err), sdk.IsConflict(err):
		return ExitInvalid
	case sdk.IsRetryable(err):
		return ExitUnavailable
	}
	return ExitError
}
