package a

func testOnly(r recorder) {
	r.Event(nil, "Warning", "FromTest", "tests are not scanned")
}
