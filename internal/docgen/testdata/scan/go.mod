module example.com/scan

go 1.25
