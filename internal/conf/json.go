package conf

import (
	"encoding/json"
	"fmt"
	"sort"
)

// DecodeJSON sets each setting of obj (a JSON object's members, by setting
// name) in *ptr, in name order, so the first error is the same every time. A
// member that names no setting is an error, unless known reports it is the
// caller's own (nil: none is).
func DecodeJSON(fields []Field, ptr any, obj map[string]json.RawMessage, known func(name string) bool) error {
	names := make([]string, 0, len(obj))
	for name := range obj {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f, ok := Lookup(fields, name)
		if !ok {
			if known != nil && known(name) {
				continue
			}
			return fmt.Errorf("unknown setting %q", name)
		}
		if err := f.SetJSON(ptr, obj[name]); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// EncodeJSON returns the settings of *ptr that keep reports true for, as a JSON
// object's members (Field.JSON).
func EncodeJSON(fields []Field, ptr any, keep func(Field) bool) map[string]any {
	out := map[string]any{}
	for _, f := range fields {
		if keep(f) {
			out[f.Name] = f.JSON(ptr)
		}
	}
	return out
}
