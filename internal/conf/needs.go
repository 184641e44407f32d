package conf

import (
	"fmt"
	"strings"
)

// NeedsError is a setting set while the feature it applies to is off (its
// needs tag): Feature is the setting that turns it on (webhook, store), Want
// the value it needs ("" for any: the feature set) and Got the value it has.
type NeedsError struct {
	Field, Feature, Want, Got string
}

func (e *NeedsError) Error() string {
	if e.Want == "" {
		return fmt.Sprintf("applies when %s is set, and it is not", e.Feature)
	}
	return fmt.Sprintf("applies to a %s %s; %s is %s", e.Want, e.Feature, e.Feature, e.Got)
}

// CheckNeeds is the one check of the needs tags: it returns a *NeedsError for
// the first setting of fields whose feature is off in *ptr while its value
// differs from the one in *def (its default), so that it would have no effect.
// A feature's value is the text of the setting it names, unless value gives
// it (the proxy's store: the kind its URL selects).
func CheckNeeds(fields []Field, ptr, def any, value func(feature string) (string, bool)) error {
	for _, f := range fields {
		if f.Needs == "" || f.Text(ptr) == f.Text(def) { // text: an empty list is no list
			continue
		}
		feature, want, _ := strings.Cut(f.Needs, "=")
		got, ok := "", false
		if value != nil {
			got, ok = value(feature)
		}
		if !ok {
			ff, found := Lookup(fields, feature)
			if !found {
				panic(fmt.Sprintf("conf: %s needs %q, which is not a setting here", f.Name, feature))
			}
			got = ff.Text(ptr)
		}
		on := got != "" && got != "false" && got != "0"
		if want == "" && on || want != "" && got == want {
			continue
		}
		return &NeedsError{Field: f.Name, Feature: feature, Want: want, Got: got}
	}
	return nil
}
