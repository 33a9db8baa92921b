//! Page reads bounded by bytes as well as by count: a store stops reading before the item that
//! would take the page over its byte budget, so no reader holds more than one answer's worth of
//! records however large they are.

/// How much one page read may return: at most `count` items, and at most `bytes` of their JSON
/// as a JSON array's content (each record's compact JSON as stored, plus one `,` between
/// records). The first record is always returned, however large, so a reader paging with the last
/// `seq` it got always moves on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageBudget {
    /// Most records in the page.
    pub count: usize,
    /// Most bytes of the records' JSON (with the `,` between them).
    pub bytes: usize,
}

impl PageBudget {
    /// At most `count` records and `bytes` of their JSON.
    pub const fn new(count: usize, bytes: usize) -> Self {
        Self { count, bytes }
    }

    /// At most `count` records, with no byte bound: for callers that page through a whole
    /// history on purpose (a runner building its context, the supervisor's sweep).
    pub const fn count(count: usize) -> Self {
        Self {
            count,
            bytes: usize::MAX,
        }
    }

    /// A running tally of this budget, for an adapter reading record by record.
    pub const fn tally(self) -> PageTally {
        PageTally {
            budget: self,
            items: 0,
            bytes: 0,
        }
    }
}

/// What a page read has taken so far against its [`PageBudget`]. An adapter asks
/// [`admit`](Self::admit) with each record's stored JSON size before it decodes the record, and
/// stops reading at the first `false`.
#[derive(Clone, Copy, Debug)]
pub struct PageTally {
    budget: PageBudget,
    items: usize,
    bytes: usize,
}

impl PageTally {
    /// Whether a record of `json_bytes` still fits (the first record always does, unless the
    /// count is 0); a fitting record is counted.
    pub fn admit(&mut self, json_bytes: usize) -> bool {
        if self.items >= self.budget.count {
            return false;
        }
        let size = json_bytes.saturating_add(usize::from(self.items > 0));
        let total = self.bytes.saturating_add(size);
        if self.items > 0 && total > self.budget.bytes {
            return false;
        }
        self.items += 1;
        self.bytes = total;
        true
    }

    /// Whether no further record can fit: the count is reached, or the bytes are (no record
    /// of at least one byte fits after a `,`).
    pub fn is_full(&self) -> bool {
        self.items >= self.budget.count
            || (self.items > 0 && self.bytes.saturating_add(2) > self.budget.bytes)
    }

    /// The budget this tally counts against.
    pub fn budget(&self) -> PageBudget {
        self.budget
    }

    /// Records admitted so far.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Bytes admitted so far (JSON with the separators).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Records the count still allows.
    pub fn remaining_count(&self) -> usize {
        self.budget.count.saturating_sub(self.items)
    }

    /// Bytes the budget still allows.
    pub fn remaining_bytes(&self) -> usize {
        self.budget.bytes.saturating_sub(self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes offered in order, and how many the tally admits.
    fn admitted(budget: PageBudget, sizes: &[usize]) -> usize {
        let mut tally = budget.tally();
        sizes.iter().take_while(|&&size| tally.admit(size)).count()
    }

    #[test]
    fn a_page_stops_before_the_record_that_would_cross_the_budget() {
        let cases: &[(PageBudget, &[usize], usize)] = &[
            // three records of 10 and two commas fit exactly in 32
            (PageBudget::new(100, 32), &[10, 10, 10, 10], 3),
            (PageBudget::new(100, 31), &[10, 10, 10, 10], 2),
            // the first record always fits, however large
            (PageBudget::new(100, 5), &[10, 1, 1], 1),
            (PageBudget::new(100, 0), &[1], 1),
            // the count still bounds
            (PageBudget::new(2, usize::MAX), &[1, 1, 1], 2),
            (PageBudget::new(0, usize::MAX), &[1], 0),
            // no byte bound
            (
                PageBudget::count(3),
                &[usize::MAX / 2, usize::MAX / 2, 7, 7],
                3,
            ),
            // a small record after a large one that did not fit is not taken either
            (PageBudget::new(100, 30), &[10, 25, 1], 1),
        ];
        for (budget, sizes, want) in cases {
            assert_eq!(admitted(*budget, sizes), *want, "{budget:?} {sizes:?}");
        }
    }

    #[test]
    fn the_tally_says_when_nothing_more_can_fit() {
        let mut tally = PageBudget::new(10, 12).tally();
        assert!(!tally.is_full());
        assert!(tally.admit(10));
        assert!(
            !tally.is_full(),
            "a one-byte record still fits after a comma"
        );
        assert!(tally.admit(1));
        assert!(tally.is_full());
        assert_eq!((tally.items(), tally.bytes()), (2, 12));
        assert_eq!(tally.remaining_bytes(), 0);
        assert_eq!(tally.remaining_count(), 8);
        let mut counted = PageBudget::new(1, usize::MAX).tally();
        assert!(counted.admit(5));
        assert!(counted.is_full());
    }
}
