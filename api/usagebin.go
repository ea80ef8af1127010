package api

import (
	"encoding/binary"
	"fmt"
	"time"
)

// UsageBatchBinary is the Content-Type of a usage batch in the binary form below, which
// POST /v1/agent/usage takes beside JSON: decoding JSON cost the apiserver about as much CPU per
// record as storing it (docs/benchmarks/billing-ingest.md).
//
// The form: "GCU1", the record count (uvarint, at most MaxUsageBatch), then each record's fields
// in UsageRecord's order: strings as a uvarint length and their bytes, Start and End as signed
// varint nanoseconds since the Unix epoch, the other numbers as varints (signed for int fields,
// unsigned for uint64 ones), each in its shortest form. Nothing may follow the last record. The form carries what JSON
// carries; billing validates the decoded records alike.
const UsageBatchBinary = "application/vnd.gpucloud.usage-batch"

// MaxUsageBatch is the most records one batch holds.
const MaxUsageBatch = 1000

var usageMagic = []byte("GCU1")

// maxUsageText bounds one string field of the binary form (billing's own bounds are smaller).
const maxUsageText = 4096

// AppendUsageBatch appends recs in the binary form to b.
func AppendUsageBatch(b []byte, recs []UsageRecord) []byte {
	b = append(b, usageMagic...)
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for i := range recs {
		r := &recs[i]
		for _, s := range [...]string{r.ID, r.Kind, r.Source, r.TenantID, r.InstanceID, r.SessionID} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		b = binary.AppendVarint(b, r.Start.UnixNano())
		b = binary.AppendVarint(b, r.End.UnixNano())
		for _, s := range [...]string{r.GPUModel, r.Tier} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		b = binary.AppendVarint(b, int64(r.GPUCount))
		for _, v := range [...]uint64{r.MemoryQuota, r.MemoryPeakBytes, r.MemoryAvgBytes, r.BytesMoved} {
			b = binary.AppendUvarint(b, v)
		}
		b = binary.AppendUvarint(b, uint64(len(r.InstanceType)))
		b = append(b, r.InstanceType...)
		b = binary.AppendVarint(b, int64(r.VCPUs))
		b = binary.AppendVarint(b, int64(r.MemoryMiB))
	}
	return b
}

// UsageDecodeError names the field of the binary form that could not be read ("records",
// "records[3].tenant_id").
type UsageDecodeError struct{ Field, Reason string }

func (e *UsageDecodeError) Error() string { return e.Field + ": " + e.Reason }

// DecodeUsageBatch reads a batch in the binary form. A body it cannot read whole is refused
// whole: unlike JSON, whose records can be cut apart, one bad length shifts every field after it.
func DecodeUsageBatch(body []byte) (UsageBatch, error) {
	d := usageDecoder{b: body, index: -1}
	if len(body) < len(usageMagic) || string(body[:len(usageMagic)]) != string(usageMagic) {
		return UsageBatch{}, &UsageDecodeError{"records", "the body does not start with the binary usage form's mark GCU1"}
	}
	d.b = d.b[len(usageMagic):]
	n := d.uvarint()
	if d.err == nil && n > MaxUsageBatch {
		return UsageBatch{}, &UsageDecodeError{"records", fmt.Sprintf("holds %d records, at most %d per batch", n, MaxUsageBatch)}
	}
	recs := make([]UsageRecord, 0, n)
	var prev UsageRecord // fields that repeat from record to record reuse its strings
	for i := 0; d.err == nil && i < int(n); i++ {
		var r UsageRecord
		d.at(i, "id").text(&r.ID)
		d.at(i, "kind").textReusing(&r.Kind, prev.Kind)
		d.at(i, "source").textReusing(&r.Source, prev.Source)
		d.at(i, "tenant_id").text(&r.TenantID)
		d.at(i, "instance_id").text(&r.InstanceID)
		d.at(i, "session_id").text(&r.SessionID)
		r.Start = time.Unix(0, d.at(i, "start").varint()).UTC()
		r.End = time.Unix(0, d.at(i, "end").varint()).UTC()
		d.at(i, "gpu_model").textReusing(&r.GPUModel, prev.GPUModel)
		d.at(i, "tier").textReusing(&r.Tier, prev.Tier)
		r.GPUCount = d.at(i, "gpu_count").int()
		r.MemoryQuota = d.at(i, "memory_quota").uvarint()
		r.MemoryPeakBytes = d.at(i, "memory_peak_bytes").uvarint()
		r.MemoryAvgBytes = d.at(i, "memory_avg_bytes").uvarint()
		r.BytesMoved = d.at(i, "bytes_moved").uvarint()
		d.at(i, "instance_type").textReusing(&r.InstanceType, prev.InstanceType)
		r.VCPUs = d.at(i, "vcpus").int()
		r.MemoryMiB = d.at(i, "memory_mib").int()
		recs = append(recs, r)
		prev = r
	}
	if d.err != nil {
		return UsageBatch{}, d.err
	}
	if len(d.b) > 0 {
		return UsageBatch{}, &UsageDecodeError{"records", fmt.Sprintf("%d bytes follow the last record", len(d.b))}
	}
	return UsageBatch{Records: recs}, nil
}

// usageDecoder reads fields off b; the first failure is kept in err (naming field) and every
// later read is a no-op.
type usageDecoder struct {
	b     []byte
	index int    // the record being read, -1 before the first
	name  string // its field being read
	err   error
}

func (d *usageDecoder) at(i int, name string) *usageDecoder {
	d.index, d.name = i, name
	return d
}

func (d *usageDecoder) fail(reason string) {
	if d.err != nil {
		return
	}
	field := "records"
	if d.index >= 0 {
		field = fmt.Sprintf("records[%d].%s", d.index, d.name) // only now: formatting every field cost more than reading it
	}
	d.err = &UsageDecodeError{field, reason}
}

const endsInside = "the body ends inside it"

// badVarint fails a varint read that returned n (<= 0, or the length of a longer encoding than
// the shortest: each batch has one encoding, so nothing is read that the encoder did not write).
func (d *usageDecoder) badVarint(n int) {
	if n == 0 {
		d.fail(endsInside)
	} else {
		d.fail("is not a varint in its shortest form")
	}
}

func (d *usageDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	var tmp [binary.MaxVarintLen64]byte
	if n <= 0 || binary.PutUvarint(tmp[:], v) != n {
		d.badVarint(n)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *usageDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	var tmp [binary.MaxVarintLen64]byte
	if n <= 0 || binary.PutVarint(tmp[:], v) != n {
		d.badVarint(n)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int reads a signed varint into an int field: within 32 bits, as every count and size there is.
func (d *usageDecoder) int() int {
	v := d.varint()
	if v < -1<<31 || v >= 1<<31 {
		d.fail(fmt.Sprintf("%d is out of range", v))
		return 0
	}
	return int(v)
}

// textReusing is text, but when the field's bytes equal was it stores was instead of allocating a
// copy: a daemon's records share their kind, source, model, tier and type.
func (d *usageDecoder) textReusing(s *string, was string) {
	n := d.uvarint()
	if d.err == nil && n == uint64(len(was)) && n <= uint64(len(d.b)) && string(d.b[:n]) == was {
		*s = was
		d.b = d.b[n:]
		return
	}
	d.textOf(n, s)
}

func (d *usageDecoder) text(s *string) { d.textOf(d.uvarint(), s) }

// textOf reads the n bytes of a string field whose length was read.
func (d *usageDecoder) textOf(n uint64, s *string) {
	switch {
	case d.err != nil:
	case n > maxUsageText:
		d.fail(fmt.Sprintf("is %d bytes long, at most %d", n, maxUsageText))
	case n > uint64(len(d.b)):
		d.fail(endsInside)
	default:
		*s = string(d.b[:n])
		d.b = d.b[n:]
	}
}
