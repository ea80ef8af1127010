package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"gpucloud/api"
	"gpucloud/billing/ingest"
	"gpucloud/internal/problem"
)

// decodedUsage is a usage batch as decoded: the records that decoded, the position in the
// request of each, and those of the wrong JSON shape (refused with their reason, like any other
// malformed record, while the rest of the batch lands).
type decodedUsage struct {
	batch       api.UsageBatch
	index       []int
	undecodable []api.UsageRejection
}

// decodeUsageAs decodes a usage batch body of the given content type: the binary form, or JSON.
func decodeUsageAs(contentType string, body []byte) (decodedUsage, *problem.Details) {
	if contentType != api.UsageBatchBinary {
		return decodeUsage(body)
	}
	b, err := api.DecodeUsageBatch(body)
	if err != nil {
		f := problem.FieldError{Field: "records", Reason: err.Error()}
		if de := (*api.UsageDecodeError)(nil); errors.As(err, &de) {
			f = problem.FieldError{Field: de.Field, Reason: de.Reason}
		}
		return decodedUsage{}, problem.Validation(f)
	}
	return wholeBatch(b), nil
}

// wholeBatch is a batch whose every record decoded, each at its own position.
func wholeBatch(b api.UsageBatch) decodedUsage {
	d := decodedUsage{batch: b, index: make([]int, len(b.Records))}
	for i := range d.index {
		d.index[i] = i
	}
	return d
}

// decodeUsage decodes a usage batch body. A well-formed batch (the common case) is decoded in
// one pass; one that fails to decode whole is decoded again record by record (decodeEach), which
// finds the records at fault and gives the same answer as if it had been decoded that way only.
func decodeUsage(body []byte) (decodedUsage, *problem.Details) {
	var whole struct {
		Records []api.UsageRecord `json:"records"`
	}
	if err := json.Unmarshal(body, &whole); err != nil || whole.Records == nil || len(whole.Records) > ingest.MaxBatch {
		return decodeEach(body)
	}
	return wholeBatch(api.UsageBatch{Records: whole.Records}), nil
}

// decodeEach decodes the batch's records one by one.
func decodeEach(body []byte) (decodedUsage, *problem.Details) {
	var raw struct {
		Records []json.RawMessage `json:"records"`
	}
	var d decodedUsage
	// A decoder, as the handler always used: data after the object is ignored.
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&raw); err != nil {
		return d, badBody(err)
	}
	if raw.Records == nil {
		return d, problem.Validation(problem.FieldError{Field: "records", Reason: "is required"})
	}
	if len(raw.Records) > ingest.MaxBatch {
		return d, problem.Validation(problem.FieldError{Field: "records",
			Reason: fmt.Sprintf("holds %d records, at most %d per batch", len(raw.Records), ingest.MaxBatch)})
	}
	d.index = make([]int, 0, len(raw.Records))
	for i, m := range raw.Records {
		var r api.UsageRecord
		if err := json.Unmarshal(m, &r); err != nil {
			d.undecodable = append(d.undecodable, api.UsageRejection{Index: i, ID: r.ID, Reason: "record: " + err.Error()})
			continue
		}
		d.batch.Records = append(d.batch.Records, r)
		d.index = append(d.index, i)
	}
	return d, nil
}
