package jnf

import (
	"bytes"
	"encoding/json"
	"errors"
)

// DecodeJSON decodes data, which must hold exactly one JSON value, into v,
// refusing fields v does not have: the strict reading that every Tarfa file
// format (record tables, manifests, golden metadata, prompt lines, convert
// journals) uses so that no data is silently ignored.
func DecodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
