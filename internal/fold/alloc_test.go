package fold

import "testing"

func TestNoAllocations(t *testing.T) {
	buf := make([]byte, 0, 64)
	name, other := []byte("Amount_ſtatus_\u212a"), "AMOUNT_STATUS_k"
	if n := testing.AllocsPerRun(100, func() {
		buf = Append(buf[:0], name)
		buf = Append(buf[:0], other)
		if !Equal(string(name), other) || !Equal(name, []byte(other)) {
			t.Fatal("not equal")
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
