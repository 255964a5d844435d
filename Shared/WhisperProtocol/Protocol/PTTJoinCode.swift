import Foundation

/// Join codes: short, typed by people, read over local radios.
public enum PTTJoinCode {
    /// No 0/O, 1/I/L: nothing that reads as another character.
    public static let alphabet = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
    public static let length = 8

    public static func isValid(_ code: String) -> Bool {
        code.utf8.count == length && code.allSatisfy { alphabet.contains($0) }
    }

    public static func make() -> String {
        let letters = Array(alphabet)
        var generator = SystemRandomNumberGenerator()
        return String((0..<length).map { _ in letters[Int(generator.next(upperBound: UInt64(letters.count)))] })
    }
}

// MARK: - What the server sends
