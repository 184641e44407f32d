package conf

import "reflect"

// HelpFunc returns the help of the setting field of struct type owner: its
// doc comment as a phrase on one line (test/settingsdoc: "how long a
// completed response is kept for replay"), "" when it has none.
type HelpFunc func(owner reflect.Type, field reflect.StructField) string

// help is where Fields finds each setting's help: the table that go generate
// ./test/settingsdoc writes from the settings' doc comments
// (settingshelp_gen.go), since no source is there at run time. This package's
// tests read their own structs' help tags instead (export_test.go).
var help HelpFunc = generatedHelp

func generatedHelp(owner reflect.Type, field reflect.StructField) string {
	return settingsHelp[HelpKey(owner, field.Name)]
}

// HelpKey is the key of a field in the help table: the import path and name
// of its struct type, then its name
// (github.com/idemproxy/idemproxy/middleware.Settings.TTL).
func HelpKey(owner reflect.Type, field string) string {
	return owner.PkgPath() + "." + owner.Name() + "." + field
}
