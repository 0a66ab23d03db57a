module github.com/kinformer/kinformer/tools/release

go 1.26.0

require golang.org/x/mod v0.43.0
