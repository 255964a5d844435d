import Foundation
import Hummingbird
import Logging
import PostgresNIO
import WhisperShared

/// Request bodies of the admin API: a JSON object of at most `maxBytes`, with no field
/// but the ones named, decoded into `T`. Every refusal is 400 `INVALID_PAYLOAD` naming
/// the field, before anything else happens.
enum AdminBody {
    static let maxBytes = 16 * 1_024

    static func decode<T: Decodable>(_ type: T.Type, from request: Request, fields: Set<String>, describe: String) async throws -> T {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: maxBytes)
        } catch {
            throw WhisperHTTPError(.invalidPayload, "the body is over \(maxBytes) bytes")
        }
        let data = Data(buffer: buffer)
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw WhisperHTTPError(.invalidPayload, "the body must be a JSON object \(describe)")
        }
        if let unknown = object.keys.sorted().first(where: { !fields.contains($0) }) {
            throw WhisperHTTPError(.invalidPayload, "\(unknown) is not a field here; the body is \(describe)")
        }
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch DecodingError.keyNotFound(let key, _) {
            throw WhisperHTTPError(.invalidPayload, "\(key.stringValue) is required; the body is \(describe)")
        } catch DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context) {
            let field = context.codingPath.map(\.stringValue).joined(separator: ".")
            throw WhisperHTTPError(.invalidPayload, "\(field) has the wrong type; the body is \(describe)")
        } catch {
            throw WhisperHTTPError(.invalidPayload, "the body must be \(describe)")
        }
    }

    /// Text an operator typed: `range` characters, no control characters but newlines.
    static func text(_ value: String, _ field: String, characters range: ClosedRange<Int>) throws -> String {
        let count = value.count
        guard range.contains(count) else {
            throw WhisperHTTPError(.invalidPayload, "\(field) must be \(range.lowerBound) to \(range.upperBound) characters")
        }
        guard !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control && $0 != "\n" }) else {
            throw WhisperHTTPError(.invalidPayload, "\(field) must not contain control characters")
        }
        return value
    }

    /// `limit` of a list: 1 to `max`, `fallback` when absent.
    static func limit(_ request: Request, max: Int, fallback: Int) throws -> Int {
        guard let text = request.uri.queryParameters["limit"].map(String.init) else { return fallback }
        guard let value = Int(text), (1...max).contains(value) else {
            throw WhisperHTTPError(.invalidPayload, "limit must be 1 to \(max)")
        }
        return value
    }
}

extension PostgresClient {
    /// A transaction whose refusals (a `WhisperHTTPError`: 404, 403) are answered as such,
    /// not as a failed transaction (500).
    func adminTransaction<T: Sendable>(
        logger: Logger, _ body: (PostgresConnection) async throws -> sending T
    ) async throws -> T {
        try await withTransaction(refusing: WhisperHTTPError.self, logger: logger, body)
    }
}
