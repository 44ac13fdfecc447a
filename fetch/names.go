package fetch

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/cacheagent/cacheagent/object"
)

// GCS naming rules (https://cloud.google.com/storage/docs/objects#naming and
// https://cloud.google.com/storage/docs/buckets#naming). Only names that
// cannot be sent in a request are refused here: names like "../../x",
// "a/./b", "a//b", a leading "/", newlines or any Unicode are passed to the
// server, which decides (GCS refuses to create names with CR or LF, but
// GCS-compatible stores and emulators may hold them, and reading one is
// harmless). Such names must never be turned into local paths; the cache
// stores objects by hash.

// maxObjectName is the longest object name, in UTF-8 bytes.
const maxObjectName = 1024

// checkGCSObject returns object.ErrInvalidName, wrapped with the reason, if GCS
// would refuse bucket or name.
func checkGCSObject(bucket, name string) error {
	if err := checkGCSBucket(bucket); err != nil {
		return err
	}
	var why string
	switch {
	case name == "":
		why = "empty"
	case len(name) > maxObjectName:
		why = fmt.Sprintf("longer than %d bytes", maxObjectName)
	case !utf8.ValidString(name):
		why = "not valid UTF-8"
	case name == "." || name == "..":
		why = `"." and ".." are reserved`
	default:
		return nil
	}
	return fmt.Errorf("object name %.64q: %s: %w", name, why, object.ErrInvalidName)
}

// checkGCSBucket returns object.ErrInvalidName if bucket breaks GCS's bucket naming
// rules: 3–63 characters (up to 222 if dotted, each dot-separated part at
// most 63), only lower-case letters, digits, '-', '_' and '.', starting and
// ending with a letter or digit. (The rules on IP-address-like and
// "goog"/"google" names govern creation and are not checked.)
func checkGCSBucket(bucket string) error {
	var why string
	switch {
	case len(bucket) < 3 || len(bucket) > 222:
		why = "not 3 to 222 characters"
	case !isAlnum(bucket[0]) || !isAlnum(bucket[len(bucket)-1]):
		why = "must start and end with a letter or digit"
	default:
		for part := range strings.SplitSeq(bucket, ".") {
			if len(part) > 63 {
				why = "a dot-separated part is longer than 63 characters"
			}
		}
		if !strings.Contains(bucket, ".") && len(bucket) > 63 {
			why = "longer than 63 characters without dots"
		}
		for i := 0; i < len(bucket) && why == ""; i++ {
			if c := bucket[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
				why = fmt.Sprintf("invalid character %q", c)
			}
		}
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("bucket name %.64q: %s: %w", bucket, why, object.ErrInvalidName)
}

// isAlnum reports whether c is a lower-case ASCII letter or a digit.
func isAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
