//! Integration tests of the layers: middleware on paused time, HTTP in memory, real loopback.
