package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

// handleVerify serves POST /v1/verify: it verifies the selected copies in
// the request's goroutine, streaming the counts (NDJSON, at most every
// watchEvery) and a final report. The client leaving stops it.
func (d *Daemon) handleVerify(w http.ResponseWriter, r *http.Request) {
	var req control.VerifyRequest
	if err := decodeBody(w, r, &req, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	if req.Rate < 0 {
		writeError(w, fmt.Errorf("%w: rate %d is negative", control.ErrInvalid, req.Rate))
		return
	}
	if req.Bucket == "" && req.Prefix != "" {
		writeError(w, fmt.Errorf("%w: a prefix without a bucket", control.ErrInvalid))
		return
	}
	defer d.stats.invalidate()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	var last time.Time
	res, err := d.cache.Verify(r.Context(), tier.VerifyOptions{Bucket: req.Bucket, Prefix: req.Prefix, Rate: req.Rate,
		Progress: func(s stats.Verify) {
			if now := time.Now(); now.Sub(last) >= watchEvery {
				last = now
				if enc.Encode(control.VerifyReport{Verify: s}) == nil {
					rc.Flush()
				}
			}
		}})
	rep := VerifyReport(res, err)
	if err != nil {
		d.log.Warn("verify stopped", "bucket", req.Bucket, "prefix", req.Prefix, "err", err)
	}
	enc.Encode(rep)
}

// VerifyReport returns a verification's result (and the error that
// stopped it, if any) as its final report: what POST /v1/verify sends last
// and the CLI's standalone verify prints.
func VerifyReport(res tier.VerifyResult, err error) control.VerifyReport {
	rep := control.VerifyReport{Verify: res.Verify, Done: true}
	for _, dc := range res.Dropped {
		rep.Dropped = append(rep.Dropped, control.DroppedCopy{Object: control.RefOf(dc.Object),
			Tier: string(dc.Tier), Reason: dc.Reason})
	}
	if err != nil {
		rep.Error = err.Error()
	}
	return rep
}
