package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"gpucloud/sdk"
)

// instanceTypeID takes an instance type's id or its name (as `instance-types list` shows it) and
// returns the id; a name no type has is a usage error naming the flag and the names there are.
func instanceTypeID(ctx context.Context, cl *sdk.Client, v string) (string, error) {
	if _, err := uuid.Parse(v); err == nil {
		return v, nil
	}
	var names []string
	for it, err := range cl.InstanceTypes(ctx) {
		if err != nil {
			return "", err
		}
		if it.Name == v {
			return it.ID, nil
		}
		names = append(names, it.Name)
	}
	return "", usagef(fmt.Errorf("--type %q: no instance type has that id or name (have: %s)", v, strings.Join(names, ", ")))
}

// instanceID takes a live instance's id or its name and returns the id. A name several live
// instances share is a usage error; one no instance has goes to the API as it is, which answers
// not found (exit 3), as for an unknown id.
func instanceID(ctx context.Context, cl *sdk.Client, v string) (string, error) {
	if _, err := uuid.Parse(v); err == nil {
		return v, nil
	}
	var ids []string
	for inst, err := range cl.Instances(ctx, sdk.InstanceFilter{}) {
		if err != nil {
			return "", err
		}
		if inst.Name == v {
			ids = append(ids, inst.ID)
		}
	}
	switch len(ids) {
	case 1:
		return ids[0], nil
	case 0:
		return v, nil
	}
	return "", usagef(fmt.Errorf("instance %q: %d live instances have that name (%s); give an id", v, len(ids), strings.Join(ids, ", ")))
}

// byInstance adapts a call that takes an instance id to take an id or a name.
func byInstance[T any](call func(*sdk.Client, context.Context, string) (T, error)) func(*sdk.Client, context.Context, string) (T, error) {
	return func(cl *sdk.Client, ctx context.Context, v string) (T, error) {
		id, err := instanceID(ctx, cl, v)
		if err != nil {
			var zero T
			return zero, err
		}
		return call(cl, ctx, id)
	}
}
