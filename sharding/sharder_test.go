package sharding_test

import (
	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/sharding"
)

// A Sharding is what informers take as kinformer.Options.Sharding.
var _ kinformer.Sharder = (*sharding.Sharding)(nil)
