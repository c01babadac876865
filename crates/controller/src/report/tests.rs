use super::*;

#[test]
fn a_list_that_fits_is_kept_whole() {
    let note = list_note("hosts: ", &["a.example.com", "b.example.com"], ", ", ".");
    assert_eq!(note, "hosts: a.example.com, b.example.com.");
}

#[test]
fn a_long_list_keeps_whole_items_and_counts_the_rest() {
    let hosts: Vec<String> = (0..200)
        .map(|i| format!("host-{i:03}.example.com"))
        .collect();
    let note = list_note("routes 200 hostname(s): ", &hosts, ", ", "");
    assert!(note.len() <= NOTE_LIMIT, "{}", note.len());
    let (listed, more) = note
        .strip_prefix("routes 200 hostname(s): ")
        .unwrap()
        .rsplit_once(", … and ")
        .unwrap();
    let listed: Vec<&str> = listed.split(", ").collect();
    assert_eq!(listed, hosts[..listed.len()], "whole names, in order");
    assert_eq!(more, format!("{} more", 200 - listed.len()));
    // As full as it can be: one more name would not fit.
    let k = listed.len() + 1;
    let fuller = format!(
        "routes 200 hostname(s): {}, … and {} more",
        hosts[..k].join(", "),
        200 - k
    );
    assert!(fuller.len() > NOTE_LIMIT, "{}", fuller.len());
}

#[test]
fn multibyte_items_are_never_split_and_the_limit_is_bytes() {
    // 100 bytes but 50 characters each: a character count would let twice as many in.
    let items: Vec<String> = (0..40).map(|_| "ü".repeat(50)).collect();
    let note = list_note("", &items, "; ", " (end)");
    assert!(note.len() <= NOTE_LIMIT, "{}", note.len());
    assert!(note.ends_with(" more (end)"), "{note}");
    let kept = note.split("; ").filter(|i| *i == "ü".repeat(50)).count();
    assert_eq!(
        note,
        format!(
            "{}; … and {} more (end)",
            items[..kept].join("; "),
            40 - kept
        )
    );
}

#[test]
fn an_item_longer_than_the_limit_is_only_counted() {
    let note = list_note("refused: ", &["x".repeat(2000)], "; ", "");
    assert_eq!(note, "refused: … and 1 more");
}

#[test]
fn a_head_over_the_limit_is_cut_on_a_character_boundary() {
    let head = "é".repeat(600);
    let note = list_note(&head, &["a"], ", ", "");
    assert!(
        note.len() <= NOTE_LIMIT && note.ends_with('…'),
        "{}",
        note.len()
    );
    assert!(note.trim_end_matches('…').chars().all(|c| c == 'é'));
}
