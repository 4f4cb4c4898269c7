//! "Did you mean": the distance between a name written and a name known,
//! shared by the macro's option errors, the registry's unknown op and
//! attribute errors and the command line, so all suggest alike.

use alloc::vec;
use alloc::vec::Vec;

/// Edit distance over bytes (names are ASCII) where swapping two adjacent
/// letters is one edit, the commonest typo (`axsi` for `axis`): the optimal
/// string alignment distance.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // Three rows: two back (for transpositions), the previous, the current.
    let mut back: Vec<usize> = (0..=b.len()).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j - 1] + cost).min(prev[j] + 1).min(cur[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(back[j - 2] + 1);
            }
            cur[j] = d;
        }
        core::mem::swap(&mut back, &mut prev);
        core::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::edit_distance;

    #[test]
    fn a_swap_is_one_edit() {
        assert_eq!(edit_distance("axis", "axis"), 0);
        assert_eq!(edit_distance("axsi", "axis"), 1);
        assert_eq!(edit_distance("folows", "follows"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
