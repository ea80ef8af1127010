// Package sdk is the Go client of the gpucloud REST API (/v1).
//
// Every call takes a context and is retried with exponential backoff when the failure is worth
// retrying: network errors, 429, and 502/503/504 or any problem the server marks retryable.
// Creates (POST) carry an Idempotency-Key that stays the same across retries, so a retried
// create never makes two resources. Failures the server explains come back as *APIError, which
// carries the problem details (status, type, field errors); IsNotFound and friends test them.
//
// Lists come page by page (ListX with a ListOptions) or as iterators over every item (X, an
// iter.Seq2 that fetches pages as it goes).
//
// The routes the SDK calls are the table in ops.go; a test checks that table against the
// OpenAPI document a running apiserver serves, both ways.
package sdk
