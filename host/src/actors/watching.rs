//! [`Watching`]: which instances each session watches, readable without asking the notifier.
//!
//! Every request about an instance subscribes its session to it first, so that the notifier
//! knows of the session before the request can change anything. Almost always the session
//! watches the instance already, and the message was a wake-up of the notifier's thread for
//! nothing: after the instance actors moved beside their callers (`workers.rs`), it was half of
//! the cross-thread wake-ups left in a call. So the notifier keeps this part of its table here,
//! in a concurrent map that callers read ([`Watching::contains`]) before sending a subscription.
//! The notifier stays the only writer, as the registry is of [`super::routes::Routes`]: a
//! session it forgets (gone, or ended) is taken out here in the same step, so its next request
//! subscribes it again.

use super::{InstanceKey, SessionId, tables::shrink_shared_if_sparse};
use crate::fast_hash::{ConcurrentMap, Set};

#[derive(Default)]
pub(super) struct Watching {
    table: ConcurrentMap<SessionId, Set<InstanceKey>>,
}

impl Watching {
    /// Whether `session` watches `instance`.
    pub(super) fn contains(&self, session: &SessionId, instance: &InstanceKey) -> bool {
        self.table
            .get(session)
            .is_some_and(|watched| watched.contains(instance))
    }

    /// `session` watches `instance` from now on; whether it did not before. The notifier's only.
    pub(super) fn insert(&self, session: SessionId, instance: InstanceKey) -> bool {
        self.table.entry(session).or_default().insert(instance)
    }

    /// Everything `session` watched, which it watches no more. The notifier's only.
    pub(super) fn take(&self, session: &SessionId) -> Set<InstanceKey> {
        let watched = self
            .table
            .remove(session)
            .map(|(_, watched)| watched)
            .unwrap_or_default();
        shrink_shared_if_sparse(&self.table);
        watched
    }

    /// (session, instance) pairs.
    pub(super) fn pairs(&self) -> usize {
        self.table.iter().map(|watched| watched.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_watches_what_was_inserted_until_it_is_taken() {
        let watching = Watching::default();
        let (session, other) = (SessionId::new(), SessionId::new());
        let key = InstanceKey::for_session(&session, "invoice");
        assert!(!watching.contains(&session, &key));
        assert!(watching.insert(session.clone(), key.clone()));
        assert!(
            !watching.insert(session.clone(), key.clone()),
            "already watched"
        );
        assert!(watching.contains(&session, &key));
        assert!(
            !watching.contains(&other, &key),
            "only the subscribed session"
        );
        assert_eq!(watching.pairs(), 1);
        let taken: Vec<InstanceKey> = watching.take(&session).into_iter().collect();
        assert_eq!(taken, std::slice::from_ref(&key));
        assert!(!watching.contains(&session, &key));
        assert_eq!(watching.pairs(), 0);
    }
}
