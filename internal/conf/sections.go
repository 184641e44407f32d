package conf

import (
	"fmt"
	"reflect"
)

// Sections is implemented, on its pointer, by a settings field whose
// settings are structs known only when the program runs, each under a prefix:
// the stores of a registry, in the proxy's configuration (redis_prefix is the
// Redis store's prefix). Fields walks each section's struct as it walks a
// field tagged conf:"prefix=P", and a Field of a section reaches it through
// Section.
type Sections interface {
	// Sections lists the sections, in the order of their settings. A zero
	// value answers.
	Sections() []Section
	// Section returns a pointer to the struct of the section with prefix, of
	// its Type, made (with its defaults) when missing.
	Section(prefix string) any
}

// Section is one section of a Sections: its prefix, the type of its struct,
// and the tags of the section as a whole, as those of a field tagged
// conf:"prefix=P": a needs tag (needs:"store=redis") reaches every setting
// inside (Field.Tag).
type Section struct {
	Prefix string
	Type   reflect.Type
	Tag    reflect.StructTag
}

// section is where a Field in a section is: the section's prefix, and the
// field's index in the section's struct.
type section struct {
	prefix string
	index  []int
}

var sectionsType = reflect.TypeFor[Sections]()

// sectionsOf returns the sections of a field of type t, if its pointer is a
// Sections.
func sectionsOf(t reflect.Type) ([]Section, bool) {
	if !reflect.PointerTo(t).Implements(sectionsType) {
		return nil, false
	}
	return reflect.New(t).Interface().(Sections).Sections(), true
}

// walkSections appends the settings of each section to out, the Sections at
// index inside the prefixed struct fields outer.
func walkSections(sections []Section, index []int, prefix string, outer []reflect.StructField, help HelpFunc, out *[]Field) {
	for _, sec := range sections {
		if sec.Type.Kind() != reflect.Struct {
			panic(fmt.Sprintf("conf: section %s: %v is not a struct", sec.Prefix, sec.Type))
		}
		// To its settings the section is a prefixed struct field they are
		// inside, with its tags (Field.Tag).
		in := append(append([]reflect.StructField(nil), outer...), reflect.StructField{Name: sec.Prefix, Type: sec.Type, Tag: sec.Tag})
		var inner []Field
		walk(sec.Type, nil, prefix+sec.Prefix, in, help, &inner)
		for _, f := range inner {
			f.in = &section{prefix: sec.Prefix, index: f.index}
			f.index = index
			*out = append(*out, f)
		}
	}
}

// field returns the field in *ptr, through its section when it is in one.
func (f Field) field(ptr any) reflect.Value {
	v := reflect.ValueOf(ptr).Elem().FieldByIndex(f.index)
	if f.in == nil {
		return v
	}
	s := v.Addr().Interface().(Sections).Section(f.in.prefix)
	return reflect.ValueOf(s).Elem().FieldByIndex(f.in.index)
}
