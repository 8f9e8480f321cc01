//! Reaching Redis in every shape it comes in: URLs, passwords and TLS, outages, what a server is
//! configured to be, the quorum mode, Redis Cluster and Sentinel.

mod cluster;
mod connection;
mod outage;
mod quorum;
mod sentinel;
mod server_conditions;
mod tls;
