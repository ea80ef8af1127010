package server_test

import (
	"strings"
	"testing"

	"gpucloud/api"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/internal/sshtest"
)

func newSSHKey(t *testing.T, comment string) (line, fingerprint string) {
	k := sshtest.New(t, comment)
	return k.Line, k.Fingerprint
}

// Keys are per user, validated and fingerprinted; a create takes key ids and an inline key plus
// validated user-data, and the host receives them all.
func TestSSHKeysAndUserData(t *testing.T) {
	e := newEnv(t)
	hostKey := e.host("h1", 32, 65536)
	line, fp := newSSHKey(t, "alice@laptop")
	var k store.SSHKey
	e.must(201, "POST", "/v1/ssh-keys", e.tenantA.Key, map[string]string{"name": "laptop", "public_key": line}, &k)
	if k.Fingerprint != fp || !strings.HasPrefix(k.Fingerprint, "SHA256:") || k.PublicKey != line {
		t.Fatalf("key %+v, want fingerprint %s", k, fp)
	}
	// The same key again (another comment) is a duplicate; bad keys name the field.
	status, _, body := e.call("POST", "/v1/ssh-keys", e.tenantA.Key, map[string]string{"name": "again", "public_key": strings.TrimSuffix(line, "alice@laptop") + "other"}, nil)
	if status != 400 || !strings.Contains(string(body), `"field":"public_key"`) || !strings.Contains(string(body), "already registered") {
		t.Fatalf("duplicate key: %d %s", status, body)
	}
	for _, bad := range []string{"hello", "ssh-ed25519 AAAAnotbase64", `command="rm -rf /" ` + line, line + "\n" + line} {
		status, _, body := e.call("POST", "/v1/ssh-keys", e.tenantA.Key, map[string]string{"name": "bad", "public_key": bad}, nil)
		if status != 400 || !strings.Contains(string(body), `"field":"public_key"`) {
			t.Errorf("key %q: %d %s", bad, status, body)
		}
	}
	e.must(403, "POST", "/v1/ssh-keys", e.operator, map[string]string{"name": "op", "public_key": line}, nil)
	// Tenant B neither sees nor uses A's key.
	var bList server.Page[store.SSHKey]
	e.must(200, "GET", "/v1/ssh-keys", e.tenantB.Key, nil, &bList)
	if len(bList.Items) != 0 {
		t.Fatalf("tenant B sees %+v", bList.Items)
	}
	e.must(404, "GET", "/v1/ssh-keys/"+k.ID.String(), e.tenantB.Key, nil, nil)
	status, _, body = e.call("POST", "/v1/instances", e.tenantB.Key, map[string]any{"name": "vm", "instance_type_id": e.cpuType, "image": "u",
		"ssh_key_ids": []string{k.ID.String()}}, nil)
	if status != 400 || !strings.Contains(string(body), `"field":"ssh_key_ids[0]"`) {
		t.Fatalf("another user's key: %d %s", status, body)
	}

	for _, c := range []struct{ userData, why string }{
		{"echo hi", `#cloud-config`},
		{"#cloud-config\nfoo: [unclosed", "not valid YAML"},
		{"#!/bin/sh\n" + strings.Repeat("x", 16<<10), "16384"},
	} {
		status, _, body := e.call("POST", "/v1/instances", e.tenantA.Key, map[string]any{"name": "vm", "instance_type_id": e.cpuType, "image": "u", "user_data": c.userData}, nil)
		if status != 400 || !strings.Contains(string(body), `"field":"user_data"`) || !strings.Contains(string(body), c.why) {
			t.Errorf("user-data %.20q: %d %s", c.userData, status, body)
		}
	}

	inline, _ := newSSHKey(t, "ci")
	userData := "#cloud-config\nwrite_files:\n- path: /etc/motd\n  content: hi\n"
	var inst store.Instance
	e.must(201, "POST", "/v1/instances", e.tenantA.Key, map[string]any{"name": "vm", "instance_type_id": e.cpuType, "image": "u",
		"ssh_key_ids": []string{k.ID.String()}, "ssh_key": inline, "user_data": userData}, &inst)
	var desired api.DesiredInstances
	e.must(200, "GET", "/v1/agent/host/instances", hostKey, nil, &desired)
	if len(desired.Instances) != 1 {
		t.Fatalf("desired %+v", desired)
	}
	spec := desired.Instances[0].Spec
	if strings.Join(spec.SSHKeys, "|") != line+"|"+inline || spec.UserData != userData {
		t.Fatalf("host gets keys %q, user-data %q", spec.SSHKeys, spec.UserData)
	}
	// Deleting the key later does not change the VM.
	e.must(204, "DELETE", "/v1/ssh-keys/"+k.ID.String(), e.tenantA.Key, nil, nil)
	e.must(200, "GET", "/v1/agent/host/instances", hostKey, nil, &desired)
	if len(desired.Instances[0].Spec.SSHKeys) != 2 {
		t.Fatalf("keys after the key's deletion: %q", desired.Instances[0].Spec.SSHKeys)
	}
}
