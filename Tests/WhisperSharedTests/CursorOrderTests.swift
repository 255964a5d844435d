import Testing
import WhisperProtocol

/// The order of `fetch_pending` cursors, which a client's walk of its queue follows only
/// forwards (`WhisperSession`: a repeated or backward cursor ends the walk).
@Suite struct CursorOrderTests {
    @Test func aCursorFollowsOnlyOneBeforeItInTheQueue() {
        #expect(Format.isCursor("1767268800000-0", after: nil))
        #expect(Format.isCursor("1767268800000-4", after: "1767268800000-3"))
        #expect(Format.isCursor("1767268800001-0", after: "1767268800000-9"))
        // Repeated, backwards, or not a cursor at all: not followed.
        #expect(!Format.isCursor("1767268800000-3", after: "1767268800000-3"))
        #expect(!Format.isCursor("1767268800000-2", after: "1767268800000-3"))
        #expect(!Format.isCursor("1767268799999-9", after: "1767268800000-0"))
        #expect(!Format.isCursor("next", after: nil))
        #expect(!Format.isCursor("1767268800000-4", after: "garbage"))
        // Numbers compare as numbers, not as text.
        #expect(Format.isCursor("10-0", after: "9-0"))
        #expect(Format.isCursor("9-10", after: "9-9"))
    }
}
