package c

func fixture(r recorder) {
	r.Event(nil, "Warning", "FromTestdata", "testdata is not scanned")
}
