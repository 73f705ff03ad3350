//! Integration tests of the `deadline` binary, run as real processes on loopback.
