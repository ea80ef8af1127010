package backend

import "errors"

func asResult(err error, r *Result) bool { return errors.As(err, r) }
