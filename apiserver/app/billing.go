package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"gpucloud/apiserver/openapi"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	billinghttp "gpucloud/billing/httpapi"
)

// NewServer builds the apiserver with every part the platform mounts into it (billing today) and
// starts their background work, which stops with ctx. The apiserver command, the local stack and
// the tests of other parts all build it here, so they serve the same routes.
func NewServer(ctx context.Context, opts server.Options) (*server.Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	runRollups, err := mountBilling(&opts, opts.Store, opts.Logger)
	if err != nil {
		return nil, err
	}
	srv, err := server.New(opts)
	if err != nil {
		return nil, err
	}
	go runRollups(ctx)
	return srv, nil
}

// mountBilling adds billing's routes and their documentation to opts, and returns the function
// that keeps billing's hourly rollups current while the server runs. Billing lives in the
// apiserver's process: it shares its database, its authentication and its /v1 namespace.
func mountBilling(opts *server.Options, st *store.Store, log *slog.Logger) (runRollups func(context.Context), err error) {
	svc := billinghttp.New(st.Pool, st, log)
	paths, err := billingPaths()
	if err != nil {
		return nil, err
	}
	opts.Mounts = append(opts.Mounts, svc.Mount)
	opts.Paths = append(opts.Paths, paths)
	return svc.RunRollups, nil
}

// billingPaths converts billing's untyped OpenAPI path items into the apiserver's document types.
// A round trip through JSON is the contract: both sides speak OpenAPI 3 JSON.
func billingPaths() (map[string]openapi.PathItem, error) {
	raw, err := json.Marshal(billinghttp.OpenAPIPaths())
	if err != nil {
		return nil, fmt.Errorf("billing openapi: encode: %w", err)
	}
	var paths map[string]openapi.PathItem
	if err := json.Unmarshal(raw, &paths); err != nil {
		return nil, fmt.Errorf("billing openapi: decode into the apiserver's document: %w", err)
	}
	return paths, nil
}
