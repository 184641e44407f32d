package conf

import "reflect"

// Tracker is implemented by a settings struct that records which of its
// settings were set (a proxy route's unset settings take the top level's): Set
// and SetJSON tell the innermost struct on a field's path that implements it.
type Tracker interface {
	MarkSet(name string)
}

var trackerType = reflect.TypeFor[Tracker]()

// markSet tells the innermost Tracker on the field's path in *ptr that the
// field was set.
func (f Field) markSet(ptr any) {
	v := reflect.ValueOf(ptr).Elem()
	var tracker Tracker
	if v.Addr().Type().Implements(trackerType) {
		tracker = v.Addr().Interface().(Tracker)
	}
	for _, i := range f.index[:len(f.index)-1] {
		v = v.Field(i)
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				break
			}
			v = v.Elem()
		}
		if v.CanAddr() && v.Addr().Type().Implements(trackerType) {
			tracker = v.Addr().Interface().(Tracker)
		}
	}
	if tracker != nil {
		tracker.MarkSet(f.Name)
	}
}
