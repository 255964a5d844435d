import Foundation

/// The JSON coders every frame goes through, made once: Foundation's coders are safe to
/// share between tasks, and building one per frame is work the hot path does not need.
public enum ProtocolJSON {
    /// Compact output, `/` left unescaped (object keys and URLs read as they are).
    public static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()

    public static let decoder = JSONDecoder()
}
