//! Host level: the real host, shim, bwrap and fakes, with the test playing the daemon.

mod launches;
