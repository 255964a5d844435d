import Foundation
import Logging
import Synchronization

/// One JSON object per line (`ts`, `level`, `service`, `event`, metadata). Metadata whose
/// key names a secret or payload is written `"[redacted]"`: defence in depth.
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    private let label: String
    private let service: String
    private let sink: JSONLogSink

    public init(label: String, service: String, level: Logger.Level, sink: JSONLogSink = .standardOutput) {
        self.label = label
        self.service = service
        self.logLevel = level
        self.sink = sink
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields = metadata
        if let extra = event.metadata {
            fields.merge(extra) { _, new in new }
        }
        var line = "{\"ts\":"
        Self.appendString(Self.timestamp(), to: &line)
        line += ",\"level\":"
        Self.appendString(event.level.rawValue, to: &line)
        line += ",\"service\":"
        Self.appendString(service, to: &line)
        line += ",\"event\":"
        Self.appendString(event.message.description, to: &line)
        if label != service {
            line += ",\"logger\":"
            Self.appendString(label, to: &line)
        }
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) where !["ts", "level", "service", "event"].contains(key) {
            line += ","
            Self.appendString(key, to: &line)
            line += ":"
            if Self.isSensitive(key) {
                line += "\"[redacted]\""
            } else {
                Self.appendValue(value, to: &line)
            }
        }
        if event.level >= .error {
            line += ",\"source\":"
            Self.appendString("\(event.file):\(event.line)", to: &line)
        }
        line += "}\n"
        sink.write(line)
    }

    /// Key names that must never carry their value into a log line.
    static func isSensitive(_ key: String) -> Bool {
        let lowered = key.lowercased()
        let exact: Set<String> = ["sig", "signature", "nonce", "ciphertext", "payload", "body", "challenge"]
        if exact.contains(lowered) { return true }
        return ["token", "secret", "password", "privatekey", "publickey", "ciphertext", "credential", "authorization", "apikey"]
            .contains { lowered.contains($0) }
    }

    private static func appendValue(_ value: Logger.Metadata.Value, to line: inout String) {
        switch value {
        case .string(let text):
            appendString(text, to: &line)
        case .stringConvertible(let convertible):
            if let number = convertible as? any BinaryInteger {
                line += "\(number)"
            } else if let number = convertible as? Double, number.isFinite {
                line += "\(number)"
            } else if let flag = convertible as? Bool {
                line += flag ? "true" : "false"
            } else {
                appendString(convertible.description, to: &line)
            }
        case .array(let values):
            line += "["
            for (index, element) in values.enumerated() {
                if index > 0 { line += "," }
                appendValue(element, to: &line)
            }
            line += "]"
        case .dictionary(let dictionary):
            line += "{"
            for (index, (key, value)) in dictionary.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { line += "," }
                appendString(key, to: &line)
                line += ":"
                if isSensitive(key) { line += "\"[redacted]\"" } else { appendValue(value, to: &line) }
            }
            line += "}"
        }
    }

    static func appendString(_ text: String, to line: inout String) {
        line += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": line += "\\\""
            case "\\": line += "\\\\"
            case "\n": line += "\\n"
            case "\r": line += "\\r"
            case "\t": line += "\\t"
            case let s where s.value < 0x20:
                let hex = String(s.value, radix: 16)
                line += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default:
                line.unicodeScalars.append(scalar)
            }
        }
        line += "\""
    }

    /// UTC with milliseconds, e.g. `2026-11-21T18:38:32.344Z`.
    static func timestamp(_ date: Date = Date()) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(milliseconds % 1000), 3))Z"
    }
}

/// Where JSON log lines go: standard output in production, a buffer in tests.
public final class JSONLogSink: Sendable {
    private let capturing: Bool
    private let lines = Mutex<[String]>([])

    private init(capturing: Bool) {
        self.capturing = capturing
    }

    public static let standardOutput = JSONLogSink(capturing: false)

    /// A sink that keeps every line in memory, for tests that check what was logged.
    public static func capturing() -> JSONLogSink { JSONLogSink(capturing: true) }

    public var captured: [String] {
        lines.withLock { $0 }
    }

    func write(_ line: String) {
        if capturing {
            lines.withLock { $0.append(line) }
        } else {
            let bytes = Array(line.utf8)
            bytes.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let written = Foundation.write(1, raw.baseAddress! + offset, raw.count - offset)
                    if written <= 0 { break }
                    offset += written
                }
            }
        }
    }
}
