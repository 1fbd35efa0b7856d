package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"
)

// asOfHeader names the response header that says when the data of an
// answer were read ("15:04:05 CEST"). It is a header, not a field, so that
// an answer's entity tag changes with the data only, and a 304 says it too.
const asOfHeader = "Almanac-As-Of"

// writeFresh answers v as JSON with an entity tag of its bytes, read at
// asOf (in asOf's zone): a request whose If-None-Match names the tag gets
// 304 Not Modified and no body, so a page that checks every few seconds
// downloads and redraws only what changed.
func writeFresh(w http.ResponseWriter, r *http.Request, v any, asOf time.Time) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only for a value JSON cannot hold: none of the page's.
		writeError(w, http.StatusInternalServerError, "internal error; see the server's log")
		return
	}
	sum := sha256.Sum256(body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("ETag", `"`+hex.EncodeToString(sum[:16])+`"`)
	h.Set(asOfHeader, asOf.Format("15:04:05 MST"))
	// ServeContent answers If-None-Match (and HEAD); no modification time:
	// the tag decides.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}
