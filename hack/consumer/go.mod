// A module as a user of kinformer writes one, outside the repository's
// modules and workspace: hack/consumer.sh copies it to a temporary
// directory, requires the modules at the version being released from a
// file proxy, builds and runs it. No requirement is kept here.
module example.com/consumer

go 1.26.0
