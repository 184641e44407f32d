package conf

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
)

// Lister is a settings struct whose help names lists kept elsewhere: the
// values a registry holds (webhook presets, key sources, error formats). Fields
// replaces each ${name} in the help of the struct's settings with
// HelpList(name), so the help, and what is derived from it, reads the
// registry instead of repeating it.
type Lister interface {
	HelpList(name string) (list string, ok bool)
}

// listRef is a ${name} in a setting's help.
var listRef = regexp.MustCompile(`\$\{([a-z_]+)\}`)

// expandLists fills the ${name}s in the help of fields, settings of type t,
// from t's HelpList. It panics on a name t does not list, or a ${name} in a
// type that is no Lister: a programming error, caught by any test that builds
// the fields.
func expandLists(t reflect.Type, fields []Field) {
	l, _ := reflect.Zero(t).Interface().(Lister)
	for i := range fields {
		fields[i].Help = listRef.ReplaceAllStringFunc(fields[i].Help, func(ref string) string {
			name := listRef.FindStringSubmatch(ref)[1]
			if l == nil {
				panic(fmt.Sprintf("conf: setting %s: help names ${%s}, and %v has no HelpList", fields[i].Name, name, t))
			}
			list, ok := l.HelpList(name)
			if !ok {
				panic(fmt.Sprintf("conf: setting %s: %v lists no ${%s}", fields[i].Name, t, name))
			}
			return list
		})
	}
}

// OrList writes a list of alternatives as prose: "a", "a or b", "a, b or c".
func OrList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}
