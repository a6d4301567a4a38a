//! URLs that answered 410 Gone. A 410 is about one endpoint, not its host: Slack answers 410
//! `channel_is_archived` for the webhook of an archived channel while every other webhook on
//! `hooks.slack.com` works. So what is held is the URL that answered — scheme, host, port and
//! path, whatever the query — and nothing else of its origin.
//!
//! A gone URL is held in two places. Here, in memory, the moment its 410 arrives: an attempt
//! about to be sent to it is given back unsent (see `Deliverer::attempt`), so a request that
//! a concurrent slot had lined up, or the 410'd delivery claimed again, never leaves. And in
//! the store: its pending deliveries are *parked* ([`spool_store::model::PARKED`]), never due,
//! so no claim takes them again, on this host or another. An operator's resume of the URL (or
//! of its origin) lifts both; the first 410 after a resume fails its delivery, so that a URL
//! still gone costs one delivery, not a loop of resumes. At start-up the set is rebuilt from
//! the parked deliveries.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use spool_store::model::Millis;

/// A target URL without its query and fragment: what a 410 holds.
pub fn url_key(target_url: &str) -> &str {
    let end = target_url.find(['?', '#']).unwrap_or(target_url.len());
    &target_url[..end]
}

/// One gone URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoneUrl {
    /// Its origin (`scheme://host:port`), as deliveries are grouped.
    pub origin: String,
    /// When its 410 came (or, for one found parked at start-up, when the daemon started).
    pub since: Millis,
}

/// The URLs that answered 410 Gone, by [`url_key`]; and those an operator resumed since, whose
/// next 410 fails its delivery.
#[derive(Debug, Default)]
pub struct GoneUrls {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    gone: BTreeMap<String, GoneUrl>,
    resumed: BTreeSet<String>,
}

/// What a 410 to a URL means for the delivery that got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered410 {
    /// The URL is newly gone: its deliveries are to be parked.
    NewlyGone,
    /// It was already gone (another request's 410 came first).
    AlreadyGone,
    /// The first 410 since an operator resumed it: this delivery fails, the URL is gone again.
    StillGone,
}

impl GoneUrls {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A set and a map only: a panic elsewhere cannot leave them inconsistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `target_url` (of `origin`) answered 410 at `now`: from now on it is gone.
    pub fn answered_410(&self, target_url: &str, origin: &str, now: Millis) -> Answered410 {
        let key = url_key(target_url);
        let mut inner = self.lock();
        let resumed = inner.resumed.remove(key);
        let new = GoneUrl {
            origin: origin.to_owned(),
            since: now,
        };
        match inner.gone.insert(key.to_owned(), new) {
            Some(before) => {
                inner.gone.insert(key.to_owned(), before);
                Answered410::AlreadyGone
            }
            None if resumed => Answered410::StillGone,
            None => Answered410::NewlyGone,
        }
    }

    /// `target_url` answered something other than 410: a resume of it is over.
    pub fn answered(&self, target_url: &str) {
        let key = url_key(target_url);
        let mut inner = self.lock();
        if !inner.resumed.is_empty() {
            inner.resumed.remove(key);
        }
    }

    /// Whether nothing may be sent to `target_url` now.
    pub fn holds(&self, target_url: &str) -> bool {
        let inner = self.lock();
        !inner.gone.is_empty() && inner.gone.contains_key(url_key(target_url))
    }

    /// Found parked at start-up (or on another host): gone since `now` unless known before.
    pub fn found(&self, target_url: &str, origin: &str, now: Millis) {
        self.lock()
            .gone
            .entry(url_key(target_url).to_owned())
            .or_insert_with(|| GoneUrl {
                origin: origin.to_owned(),
                since: now,
            });
    }

    /// An operator resumed `url` (a [`url_key`]): whether it was gone.
    pub fn resume_url(&self, url: &str) -> bool {
        let mut inner = self.lock();
        let was = inner.gone.remove(url).is_some();
        inner.resumed.insert(url.to_owned());
        was
    }

    /// An operator resumed `origin`: every gone URL of it is resumed. The URLs that were gone.
    pub fn resume_origin(&self, origin: &str) -> Vec<String> {
        let mut inner = self.lock();
        let urls: Vec<String> = inner
            .gone
            .iter()
            .filter(|(_, g)| g.origin == origin)
            .map(|(url, _)| url.clone())
            .collect();
        for url in &urls {
            inner.gone.remove(url);
            inner.resumed.insert(url.clone());
        }
        urls
    }

    /// The gone URLs, in URL order.
    pub fn list(&self) -> Vec<(String, GoneUrl)> {
        self.lock()
            .gone
            .iter()
            .map(|(url, g)| (url.clone(), g.clone()))
            .collect()
    }

    /// How many URLs are gone, by origin.
    pub fn by_origin(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for g in self.lock().gone.values() {
            *counts.entry(g.origin.clone()).or_insert(0) += 1;
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_held_whatever_its_query_and_nothing_else_of_its_origin() {
        let gone = GoneUrls::default();
        let o = "http://127.0.0.1:9";
        let url = "http://127.0.0.1:9/services/T1/B1/x";
        assert_eq!(url_key(&format!("{url}?a=1")), url);
        assert_eq!(gone.answered_410(url, o, 1), Answered410::NewlyGone);
        assert_eq!(
            gone.answered_410(&format!("{url}?a=1"), o, 2),
            Answered410::AlreadyGone
        );
        assert!(gone.holds(url) && gone.holds(&format!("{url}?b=2")));
        assert!(!gone.holds("http://127.0.0.1:9/services/T1/B2/y"));
        assert!(!gone.holds(&format!("{url}x")));
        assert_eq!(gone.list()[0].1.since, 1, "the first 410 is when it went");
        assert_eq!(gone.by_origin(), BTreeMap::from([(o.to_owned(), 1)]));
    }

    #[test]
    fn after_a_resume_the_first_410_fails_and_any_other_answer_ends_the_resume() {
        let gone = GoneUrls::default();
        let o = "http://127.0.0.1:9";
        let (a, b) = ("http://127.0.0.1:9/a", "http://127.0.0.1:9/b");
        gone.answered_410(a, o, 1);
        gone.answered_410(b, o, 1);
        assert_eq!(gone.resume_origin(o), [a.to_owned(), b.to_owned()]);
        assert!(!gone.holds(a) && !gone.holds(b));
        assert_eq!(gone.answered_410(a, o, 2), Answered410::StillGone);
        assert!(gone.holds(a));
        gone.answered(b);
        assert_eq!(gone.answered_410(b, o, 3), Answered410::NewlyGone);
        assert!(gone.resume_url(a));
        assert!(!gone.resume_url(a), "no longer gone");
    }
}
