//! Every test of the conformance package but the model checker's, in one binary (one build and one link instead of
//! eleven): each file is a module, and its tests are named `<file>::<test>`.

mod campaign;
mod campaign_etcd;
mod conformance;
mod contract;
mod election_data;
mod etcd_backend;
mod etcd_nesting;
mod etcd_secure;
mod fencing_postgres;
mod history;
mod interop;
mod interop_etcd;
mod interop_etcd_elect;
mod interop_kills;
mod runtime_gone;
mod suite_complete;
mod zk_acl;
mod zk_faults;
mod zk_leftovers;
mod zk_secure;
