//! A session's queue of requests, or of replies and watch events, counted in its server's total.

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A session's queue (requests sent or orphaned, replies and events on their way), whose length counts in a total
/// that the server's every queue shares: finding what comes due next need not visit every session when nothing is
/// queued anywhere (the automatic mode, without latency, where each request is answered at once), which made each
/// request cost as many steps as there were sessions.
///
/// Reads go through `Deref`; every change goes through the methods below, which keep the total.
#[derive(Debug)]
pub(crate) struct Queue<T> {
    items: VecDeque<T>,
    total: Arc<AtomicUsize>,
}

impl<T> Queue<T> {
    /// An empty queue counted in `total`.
    pub fn new(total: &Arc<AtomicUsize>) -> Self {
        Queue {
            items: VecDeque::new(),
            total: total.clone(),
        }
    }

    pub fn push_back(&mut self, item: T) {
        self.total.fetch_add(1, Ordering::Relaxed);
        self.items.push_back(item);
    }

    pub fn pop_front(&mut self) -> Option<T> {
        let item = self.items.pop_front();
        if item.is_some() {
            self.total.fetch_sub(1, Ordering::Relaxed);
        }
        item
    }

    /// Takes every item out (the queue is left empty).
    pub fn take(&mut self) -> VecDeque<T> {
        self.total.fetch_sub(self.items.len(), Ordering::Relaxed);
        std::mem::take(&mut self.items)
    }

    pub fn clear(&mut self) {
        drop(self.take());
    }

    pub fn extend(&mut self, items: impl IntoIterator<Item = T>) {
        for item in items {
            self.push_back(item);
        }
    }
}

impl<T> Deref for Queue<T> {
    type Target = VecDeque<T>;

    fn deref(&self) -> &VecDeque<T> {
        &self.items
    }
}

impl<T> IntoIterator for Queue<T> {
    type Item = T;
    type IntoIter = std::collections::vec_deque::IntoIter<T>;

    fn into_iter(mut self) -> Self::IntoIter {
        self.take().into_iter()
    }
}

impl<T> Drop for Queue<T> {
    fn drop(&mut self) {
        self.total.fetch_sub(self.items.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The total follows every change of every queue that shares it, a dropped queue's items included.
    #[test]
    fn the_total_counts_every_queue() {
        let total = Arc::new(AtomicUsize::new(0));
        let count = || total.load(Ordering::Relaxed);
        let mut a = Queue::new(&total);
        let mut b = Queue::new(&total);
        a.push_back(1);
        a.extend([2, 3]);
        b.push_back(4);
        assert_eq!(count(), 4);
        assert_eq!(a.pop_front(), Some(1));
        assert_eq!(b.pop_front(), Some(4));
        assert_eq!(b.pop_front(), None);
        assert_eq!(count(), 2);
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), [2, 3]);
        let taken = a.take();
        assert_eq!((taken.len(), count()), (2, 0));
        a.extend(taken);
        b.push_back(5);
        b.clear();
        assert_eq!(count(), 2);
        assert_eq!(a.into_iter().collect::<Vec<_>>(), [2, 3]);
        assert_eq!(count(), 0);
        let mut c = Queue::new(&total);
        c.push_back(6);
        drop(c);
        assert_eq!(count(), 0);
    }
}
