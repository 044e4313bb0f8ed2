package dev.prefill4j.engine.draft;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import org.junit.jupiter.api.Test;

class PromptLookupDraftsTest {
    @Test
    void proposesWhatFollowedTheMostRecentMatchOfTheLongestSuffix() {
        DraftSource d = PromptLookupDrafts.defaults();
        // suffix [7, 8, 9] occurred at 1..3 followed by 5, 6; suffix [8, 9] also at 10..11 (more recent) but shorter.
        int[] h = {1, 7, 8, 9, 5, 6, 2, 3, 4, 0, 8, 9, 1, 7, 8, 9};
        assertArrayEquals(new int[] {5, 6, 2}, d.propose(h, h.length, 3));
        assertArrayEquals(new int[] {5}, d.propose(h, h.length, 1));
    }

    @Test
    void fallsBackToShorterSuffixesAndProposesNothingWithoutAMatch() {
        DraftSource d = PromptLookupDrafts.defaults();
        assertArrayEquals(new int[] {4, 9}, d.propose(new int[] {3, 4, 9, 5, 3}, 5, 2));
        assertArrayEquals(new int[0], d.propose(new int[] {1, 2, 3}, 3, 4));
        assertArrayEquals(new int[0], d.propose(new int[] {1}, 1, 4));
    }
}
