import Foundation
import Testing
import WhisperClient
import WhisperShared

/// Item 7 of issue 34: an HTTP body over its bound is answered at once with the
/// documented JSON error, whatever the size and however the client writes it, and the
/// service goes on serving.
@Suite struct RequestBodyLimitTests {
    /// A body with `Transfer-Encoding: chunked`, in 64 KiB chunks.
    static func chunked(_ size: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var left = size
        while left > 0 {
            let count = min(left, 65_536)
            bytes += Array("\(String(count, radix: 16))\r\n".utf8) + [UInt8](repeating: 0x78, count: count) + Array("\r\n".utf8)
            left -= count
        }
        return bytes + Array("0\r\n\r\n".utf8)
    }

    static func head(_ method: String, _ path: String, token: String, length: Int?, close: Bool) -> String {
        var lines = ["\(method) \(path) HTTP/1.1", "Host: 127.0.0.1", "Authorization: Bearer \(token)", "Content-Type: application/json"]
        lines.append(length.map { "Content-Length: \($0)" } ?? "Transfer-Encoding: chunked")
        if close { lines.append("Connection: close") }
        return lines.joined(separator: "\r\n")
    }

    @Test func oversizeBodiesGetTheJSONErrorEvenFromClientsThatWriteEverythingFirst() async throws {
        try await AttachmentTests.start().running { signer in
            let stack = signer.stack
            let user = try await stack.user(on: 0)
            let cases: [(port: Int, method: String, path: String, size: Int, declared: Bool, close: Bool)] = [
                // Declared over every bound (2 MiB): refused before the route runs.
                (stack.auth.port, "PUT", "/backup/contacts", 5_000_000, true, true),
                (stack.auth.port, "PUT", "/backup/contacts", 20_000_000, true, false),
                (signer.service.port, "POST", "/attachments/presign", 20_000_000, true, true),
                // Under 2 MiB but over the route's own bound (4 KiB for a presign, 1 MiB of
                // ciphertext for a backup): the route's refusal becomes the same answer.
                (signer.service.port, "POST", "/attachments/presign", 1_500_000, true, true),
                (stack.auth.port, "PUT", "/backup/contacts", 1_900_000, true, true),
                // No length given: chunks until the route's bound is passed.
                (signer.service.port, "POST", "/attachments/presign", 600_000, false, true),
                (stack.auth.port, "PUT", "/backup/contacts", 5_000_000, false, false),
            ]
            for item in cases {
                let body = item.declared ? [UInt8](repeating: 0x78, count: item.size) : Self.chunked(item.size)
                let answer = try await RawHTTP.exchange(
                    port: item.port, head: Self.head(item.method, item.path, token: user.token, length: item.declared ? item.size : nil, close: item.close),
                    body: body
                )
                let label = "\(item.path) \(item.size) bytes, \(item.declared ? "declared" : "chunked")"
                #expect(answer.status == 413, "\(label): \(answer.status)")
                #expect(answer.headers["content-type"] == "application/json", "\(label)")
                #expect(answer.errorCode == "INVALID_PAYLOAD", "\(label)")
                #expect(answer.headers["connection"] == "close", "\(label)")
                try? await answer.channel.close().get()
            }
            // Still serving: a backup within bounds is stored, a presign answered.
            let backup = try ContactsBackup(contacts: []).sealed(with: user.keys)
            #expect(try await ContactsBackupTests.call(.PUT, stack, token: user.token, body: backup).status == 200)
            #expect(try await AttachmentTests.presign(signer, user, size: 1_000).status == 200)
        }
    }
}
