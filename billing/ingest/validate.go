// Package ingest takes usage records from daemons into PostgreSQL exactly once by id, booking each
// into its tenant's open period and maintaining the hourly rollups in the same statement.
package ingest

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"gpucloud/api"
)

// Limits on a record. They bound the arithmetic (no overflow of the bigint rollups) and catch
// daemons sending nonsense, such as a zero time or a session billed for a year.
const (
	MaxBatch       = api.MaxUsageBatch
	MaxIDLen       = 256
	MaxFieldLen    = 128
	MaxInterval    = 24 * time.Hour
	MaxFutureSkew  = 5 * time.Minute
	MaxGPUCount    = 64
	MaxMemoryQuota = 1 << 40 // 1 TiB per GPU
	MaxVCPUs       = 1024
	MaxMemoryMiB   = 16 << 20 // 16 TiB
)

// Tiers a gpu record may carry.
const (
	TierDedicated = "dedicated"
	TierShared    = "shared"
)

var earliest = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Validate checks r and returns it normalised: times truncated to milliseconds in UTC (the unit
// usage is measured in) and the fields of the other kind cleared. now bounds how far in the future
// an interval may end. The error names the first field that is wrong.
func Validate(r api.UsageRecord, now time.Time) (api.UsageRecord, error) {
	r, _, err := validate(r, now)
	return r, err
}

// validate is Validate, also returning the tenant id's bytes (so the ingester parses it once).
func validate(r api.UsageRecord, now time.Time) (api.UsageRecord, [16]byte, error) {
	r, err := validateAll(r, now)
	if err != nil {
		return r, [16]byte{}, err
	}
	return r, uuid.Must(uuid.Parse(r.TenantID)), nil
}

func validateAll(r api.UsageRecord, now time.Time) (api.UsageRecord, error) {
	if err := checkText("id", r.ID, MaxIDLen); err != nil {
		return r, err
	}
	if err := checkText("source", r.Source, MaxFieldLen); err != nil {
		return r, err
	}
	tid, err := uuid.Parse(r.TenantID)
	if err != nil || tid == uuid.Nil {
		return r, fmt.Errorf("tenant_id: %q is not a tenant uuid", r.TenantID)
	}
	r.TenantID = canonicalUUID(r.TenantID, tid)
	if err := checkText("instance_id", r.InstanceID, MaxFieldLen); err != nil {
		return r, err
	}
	if r.SessionID != "" {
		if err := checkText("session_id", r.SessionID, MaxFieldLen); err != nil {
			return r, err
		}
	}
	r.Start = r.Start.UTC().Truncate(time.Millisecond)
	r.End = r.End.UTC().Truncate(time.Millisecond)
	switch {
	case r.Start.Before(earliest):
		return r, fmt.Errorf("start: %s is before %s", r.Start.Format(time.RFC3339), earliest.Format("2006"))
	case !r.End.After(r.Start):
		return r, fmt.Errorf("end: %s is not after start %s", r.End.Format(time.RFC3339Nano), r.Start.Format(time.RFC3339Nano))
	case r.End.Sub(r.Start) > MaxInterval:
		return r, fmt.Errorf("end: interval of %s is longer than %s", r.End.Sub(r.Start), MaxInterval)
	case r.End.After(now.Add(MaxFutureSkew)):
		return r, fmt.Errorf("end: %s is in the future", r.End.Format(time.RFC3339))
	}
	switch r.Kind {
	case api.UsageGPU:
		return validateGPU(r)
	case api.UsageVM:
		return validateVM(r)
	default:
		return r, fmt.Errorf("kind: %q is neither %q nor %q", r.Kind, api.UsageGPU, api.UsageVM)
	}
}

func validateGPU(r api.UsageRecord) (api.UsageRecord, error) {
	if err := checkText("gpu_model", r.GPUModel, MaxFieldLen); err != nil {
		return r, err
	}
	if r.Tier != TierDedicated && r.Tier != TierShared {
		return r, fmt.Errorf("tier: %q is neither %q nor %q", r.Tier, TierDedicated, TierShared)
	}
	if r.GPUCount < 1 || r.GPUCount > MaxGPUCount {
		return r, fmt.Errorf("gpu_count: %d is outside 1..%d", r.GPUCount, MaxGPUCount)
	}
	if r.MemoryQuota > MaxMemoryQuota {
		return r, fmt.Errorf("memory_quota: %d bytes is more than %d", r.MemoryQuota, uint64(MaxMemoryQuota))
	}
	// A shared session pays by its slice (memory quota); without one it cannot be rated.
	if r.Tier == TierShared && r.MemoryQuota < 1<<20 {
		return r, fmt.Errorf("memory_quota: a shared session needs a quota of at least 1 MiB, got %d bytes", r.MemoryQuota)
	}
	const maxInt64 = 1<<63 - 1
	for _, f := range []struct {
		name string
		v    uint64
	}{{"memory_peak_bytes", r.MemoryPeakBytes}, {"memory_avg_bytes", r.MemoryAvgBytes}, {"bytes_moved", r.BytesMoved}} {
		if f.v > maxInt64 {
			return r, fmt.Errorf("%s: %d does not fit a signed 64-bit integer", f.name, f.v)
		}
	}
	if r.MemoryAvgBytes > r.MemoryPeakBytes {
		return r, fmt.Errorf("memory_avg_bytes: %d is more than memory_peak_bytes %d", r.MemoryAvgBytes, r.MemoryPeakBytes)
	}
	r.InstanceType, r.VCPUs, r.MemoryMiB = "", 0, 0
	return r, nil
}

func validateVM(r api.UsageRecord) (api.UsageRecord, error) {
	if err := checkText("instance_type", r.InstanceType, MaxFieldLen); err != nil {
		return r, err
	}
	if r.VCPUs < 1 || r.VCPUs > MaxVCPUs {
		return r, fmt.Errorf("vcpus: %d is outside 1..%d", r.VCPUs, MaxVCPUs)
	}
	if r.MemoryMiB < 1 || r.MemoryMiB > MaxMemoryMiB {
		return r, fmt.Errorf("memory_mib: %d is outside 1..%d", r.MemoryMiB, MaxMemoryMiB)
	}
	r.GPUModel, r.Tier, r.GPUCount = "", "", 0
	r.MemoryQuota, r.MemoryPeakBytes, r.MemoryAvgBytes, r.BytesMoved = 0, 0, 0, 0
	return r, nil
}

// checkText refuses empty, over-long, invalid UTF-8 and control characters: ids end up in CSV
// exports and logs.
func checkText(field, s string, max int) error {
	if s != "" && len(s) <= max && plainASCII(s) {
		return nil // the common case, without decoding runes
	}
	return checkTextRunes(field, s, max)
}

// checkTextRunes is checkText for any text.
func checkTextRunes(field, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s: is empty", field)
	case len(s) > max:
		return fmt.Errorf("%s: is %d bytes, more than %d", field, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s: is not valid UTF-8", field)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%s: contains a control character", field)
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("%s: has leading or trailing space", field)
	}
	return nil
}

// plainASCII says s is printable ASCII (space included) that neither starts nor ends with a space:
// what checkText accepts, checked a byte at a time.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return s[0] != ' ' && s[len(s)-1] != ' '
}

// canonicalUUID returns s, the text of u, in u's canonical form (lower case, hyphenated): s
// itself when it already is (no allocation, the common case).
func canonicalUUID(s string, u uuid.UUID) string {
	var buf [36]byte
	hex.Encode(buf[0:8], u[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], u[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], u[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], u[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], u[10:])
	if string(buf[:]) == s {
		return s
	}
	return string(buf[:])
}
