module github.com/oz0/examples/harness-go

go 1.22
