package cli

import (
	"encoding/json"
	"io"
)

// WriteJSON writes v to out as indented JSON.
func WriteJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
