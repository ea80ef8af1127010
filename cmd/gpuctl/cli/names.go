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
