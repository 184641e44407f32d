package conf

import "reflect"

// The structs of this package's tests carry their help in a help tag: no
// generated table describes them. The settings of the product, which some
// tests walk too, keep theirs.
func init() {
	help = func(owner reflect.Type, field reflect.StructField) string {
		if text, ok := field.Tag.Lookup("help"); ok {
			return text
		}
		return generatedHelp(owner, field)
	}
}
