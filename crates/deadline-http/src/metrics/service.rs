//! What an application holds: [`DeadlineMetrics`] (the families in its registry) and one
//! [`ServiceMetrics`] per service name, which hands each layer its series.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use prometheus_client::registry::Registry;

use super::call::TargetRecorder;
use super::families::Families;
use super::hop::HopRecorder;
use super::query::QueryMetrics;

/// The deadline metric families, registered in an application's [`Registry`]. Make one per
/// registry, then one [`ServiceMetrics`] per service name with [`service`](Self::service).
///
/// Cheap to clone: clones share the families.
#[derive(Clone, Debug)]
pub struct DeadlineMetrics {
    families: Arc<Families>,
}

impl DeadlineMetrics {
    /// Registers the deadline metric families (see the [module docs](super#the-metric-set)) in
    /// `registry`. Call it once per registry: a second call registers the names again, and the
    /// scrape would repeat them.
    pub fn register(registry: &mut Registry) -> DeadlineMetrics {
        DeadlineMetrics {
            families: Arc::new(Families::register(registry)),
        }
    }

    /// The series of the service called `name` (the `service` label), all created now at 0.
    /// Give it to the service's [`EnforceDeadlineLayer`](crate::EnforceDeadlineLayer) and its
    /// outbound clients with their `record_metrics` methods.
    pub fn service(&self, name: impl Into<String>) -> ServiceMetrics {
        let service: Arc<str> = Arc::from(name.into());
        let hop = HopRecorder::new(&self.families, &service);
        ServiceMetrics {
            families: self.families.clone(),
            service,
            hop: Arc::new(hop),
            targets: Arc::default(),
        }
    }
}

/// One service's deadline series: made by [`DeadlineMetrics::service`], given to that service's
/// layers. Cheap to clone.
#[derive(Clone)]
pub struct ServiceMetrics {
    families: Arc<Families>,
    service: Arc<str>,
    hop: Arc<HopRecorder>,
    /// Each target's series, resolved at its first call and kept: a client with no target
    /// name looks up its request's authority here instead of resolving seven series per call.
    targets: Arc<Mutex<HashMap<Arc<str>, Arc<TargetRecorder>>>>,
}

impl fmt::Debug for ServiceMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceMetrics")
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

impl ServiceMetrics {
    /// The `service` label.
    pub fn name(&self) -> &str {
        &self.service
    }

    /// The database series of this service (created now at 0): give them to the database
    /// pool that runs statements for it.
    pub fn queries(&self) -> QueryMetrics {
        QueryMetrics::new(&self.families, &self.service)
    }

    pub(crate) fn hop(&self) -> Arc<HopRecorder> {
        self.hop.clone()
    }

    /// The outbound series for calls to `target`, created at its first call.
    pub(crate) fn target(&self, target: &str) -> Arc<TargetRecorder> {
        // A poisoned lock only means another thread panicked while inserting a finished value.
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(recorder) = targets.get(target) {
            return Arc::clone(recorder);
        }
        let name: Arc<str> = Arc::from(target);
        let recorder = Arc::new(TargetRecorder::new(&self.families, &self.service, &name));
        targets.insert(name, Arc::clone(&recorder));
        recorder
    }
}
