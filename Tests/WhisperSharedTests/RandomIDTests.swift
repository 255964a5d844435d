import Foundation
import Testing
@testable import WhisperProtocol
import WhisperShared

@Suite struct RandomIDTests {
    /// Fixed words in, a known string out: the bits land where RFC 9562 puts them.
    struct Replay: RandomNumberGenerator {
        var words: [UInt64]
        mutating func next() -> UInt64 { words.removeFirst() }
    }

    @Test func versionAndVariantBitsAreSetAndTheRestIsKept() {
        var all = Replay(words: [.max, .max])
        #expect(RandomID.uuid(using: &all) == "ffffffff-ffff-4fff-bfff-ffffffffffff")
        var none = Replay(words: [0, 0])
        #expect(RandomID.uuid(using: &none) == "00000000-0000-4000-8000-000000000000")
        var mixed = Replay(words: [0x0123_4567_89AB_CDEF, 0xFEDC_BA98_7654_3210])
        #expect(RandomID.uuid(using: &mixed) == "01234567-89ab-4def-bedc-ba9876543210")
    }

    @Test func idsAreLowerCaseUUIDsThatFoundationReadsBack() {
        for _ in 0..<1_000 {
            let id = RandomID.uuid()
            #expect(Format.isUUID(id))
            #expect(id == id.lowercased())
            let parsed = UUID(uuidString: id)
            #expect(parsed?.uuidString.lowercased() == id)
            #expect(Array(id.utf8)[14] == UInt8(ascii: "4"))
            #expect("89ab".utf8.contains(Array(id.utf8)[19]))
        }
    }

    @Test func idsDoNotRepeat() {
        let ids = (0..<10_000).map { _ in RandomID.uuid() }
        #expect(Set(ids).count == ids.count)
    }

    /// Socket IDs (`connId`): 15 characters of 0-9a-z, short enough for Swift to keep
    /// inside the string (15 UTF-8 bytes at most on 64-bit platforms), and not repeated.
    @Test func shortIDsFitInsideTheStringAndDoNotRepeat() {
        // The smallest word the unbiased draw keeps for a 0 (a 0 word is drawn again).
        var none = Replay(words: Array(repeating: 1, count: RandomID.shortLength))
        #expect(RandomID.short(using: &none) == "000000000000000")
        var all = Replay(words: Array(repeating: .max, count: RandomID.shortLength))
        #expect(RandomID.short(using: &all) == "zzzzzzzzzzzzzzz")
        let alphabet = Set("0123456789abcdefghijklmnopqrstuvwxyz".utf8)
        let ids = (0..<10_000).map { _ in RandomID.short() }
        #expect(ids.allSatisfy { $0.utf8.count == 15 && $0.utf8.allSatisfy(alphabet.contains) })
        #expect(Set(ids).count == ids.count)
    }
}
