//! Looking at locks: `status` (and its waiters, `--watch`, the Prometheus format), `log`,
//! `exec --report`, and all of them on a Redis Cluster.

mod cluster;
mod history;
mod metrics;
mod report;
mod status;
mod waiters;
mod watch;
