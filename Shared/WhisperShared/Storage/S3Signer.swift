import Crypto
import Foundation

/// Where the attachment blobs live: any S3-compatible store (AWS S3, MinIO, Ceph RGW,
/// moto), addressed path-style (`<endpoint>/<bucket>/<key>`) or virtual-host style
/// (`<scheme>://<bucket>.<host>/<key>`).
public struct S3Location: Sendable, Equatable {
    /// `https://s3.eu-central-1.amazonaws.com`, `http://127.0.0.1:9000`.
    public var endpoint: String
    public var region: String
    public var bucket: String
    public var pathStyle: Bool

    public init(endpoint: String, region: String, bucket: String, pathStyle: Bool) {
        self.endpoint = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        self.region = region
        self.bucket = bucket
        self.pathStyle = pathStyle
    }

    var scheme: String { endpoint.hasPrefix("https://") ? "https" : "http" }
    var endpointHost: String {
        let rest = endpoint.drop { $0 != "/" }.drop { $0 == "/" }
        return String(rest.prefix { $0 != "/" })
    }

    /// The `Host` an object's requests go to.
    public var host: String { pathStyle ? endpointHost : "\(bucket).\(endpointHost)" }

    /// The request path of an object (or of the bucket, for an empty key), URI-encoded.
    public func path(for key: String) -> String {
        let encodedKey = S3Signer.encode(key, keepSlash: true)
        if pathStyle { return key.isEmpty ? "/\(bucket)" : "/\(bucket)/\(encodedKey)" }
        return "/\(encodedKey)"
    }

    public func url(for key: String, query: String = "") -> String {
        "\(scheme)://\(host)\(path(for: key))" + (query.isEmpty ? "" : "?\(query)")
    }
}

/// AWS Signature Version 4 for S3, written from AWS's specification and checked against
/// its published examples (Tests/WhisperSharedTests/S3SignerTests.swift): presigned
/// URLs for clients (the signature in the query) and signed requests for the server's
/// own calls (the signature in `Authorization`).
public struct S3Signer: Sendable {
    public let location: S3Location
    let accessKeyId: String
    let secretAccessKey: String

    public init(location: S3Location, accessKeyId: String, secretAccessKey: String) {
        self.location = location
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
    }

    /// The payload hash of a presigned request: the body is not known when signing.
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"
    /// SHA-256 of nothing, for requests without a body.
    public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// A presigned URL for `method` on `key`, good for `expires` seconds from `date`.
    /// `headers` (name → value) are signed as well: the client must send exactly those
    /// values (for a PUT, `content-length` and `content-type`, so the store refuses any
    /// other size or type). `host` is always signed.
    public func presignedURL(method: String, key: String, expires: Int, headers: [String: String] = [:], date: Date) -> String {
        let (amzDate, day) = Self.timestamps(date)
        let scope = "\(day)/\(location.region)/s3/aws4_request"
        var signed = headers.reduce(into: [String: String]()) { $0[$1.key.lowercased()] = Self.trim($1.value) }
        signed["host"] = location.host
        let signedNames = signed.keys.sorted().joined(separator: ";")
        let query: [(String, String)] = [
            ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
            ("X-Amz-Credential", "\(accessKeyId)/\(scope)"),
            ("X-Amz-Date", amzDate),
            ("X-Amz-Expires", String(expires)),
            ("X-Amz-SignedHeaders", signedNames),
        ]
        let canonicalQuery = Self.canonicalQuery(query)
        let canonical = canonicalRequest(
            method: method, path: location.path(for: key), query: canonicalQuery, headers: signed, payloadHash: Self.unsignedPayload
        )
        let signature = self.signature(of: canonical, amzDate: amzDate, scope: scope, day: day)
        return location.url(for: key, query: canonicalQuery + "&X-Amz-Signature=\(signature)")
    }

    /// Headers that authorize the server's own request (`HEAD`, `DELETE`, bucket calls):
    /// `x-amz-date`, `x-amz-content-sha256` and `Authorization`, plus `headers` signed.
    public func signedHeaders(
        method: String, key: String, query: [(String, String)] = [], headers: [String: String] = [:], payloadHash: String = S3Signer.emptyPayloadHash,
        date: Date
    ) -> [(String, String)] {
        let (amzDate, day) = Self.timestamps(date)
        let scope = "\(day)/\(location.region)/s3/aws4_request"
        var signed = headers.reduce(into: [String: String]()) { $0[$1.key.lowercased()] = Self.trim($1.value) }
        signed["host"] = location.host
        signed["x-amz-date"] = amzDate
        signed["x-amz-content-sha256"] = payloadHash
        let signedNames = signed.keys.sorted().joined(separator: ";")
        let canonical = canonicalRequest(
            method: method, path: location.path(for: key), query: Self.canonicalQuery(query), headers: signed, payloadHash: payloadHash
        )
        let signature = self.signature(of: canonical, amzDate: amzDate, scope: scope, day: day)
        let authorization = "AWS4-HMAC-SHA256 Credential=\(accessKeyId)/\(scope),SignedHeaders=\(signedNames),Signature=\(signature)"
        return signed.filter { $0.key != "host" }.sorted { $0.key < $1.key }.map { ($0.key, $0.value) } + [("Authorization", authorization)]
    }

    func canonicalRequest(method: String, path: String, query: String, headers: [String: String], payloadHash: String) -> String {
        let names = headers.keys.sorted()
        let canonicalHeaders = names.map { "\($0):\(headers[$0] ?? "")\n" }.joined()
        return [method, path, query, canonicalHeaders, names.joined(separator: ";"), payloadHash].joined(separator: "\n")
    }

    func signature(of canonicalRequest: String, amzDate: String, scope: String, day: String) -> String {
        let stringToSign = [
            "AWS4-HMAC-SHA256", amzDate, scope, Array(SHA256.hash(data: Array(canonicalRequest.utf8))).hexString,
        ].joined(separator: "\n")
        var key = SymmetricKey(data: Array("AWS4\(secretAccessKey)".utf8))
        for part in [day, location.region, "s3", "aws4_request"] {
            key = SymmetricKey(data: Array(HMAC<SHA256>.authenticationCode(for: Array(part.utf8), using: key)))
        }
        return Array(HMAC<SHA256>.authenticationCode(for: Array(stringToSign.utf8), using: key)).hexString
    }

    static func canonicalQuery(_ pairs: [(String, String)]) -> String {
        let encoded: [(name: String, value: String)] = pairs.map { (encode($0.0, keepSlash: false), encode($0.1, keepSlash: false)) }
        let sorted = encoded.sorted { (left, right) -> Bool in
            left.name == right.name ? left.value < right.value : left.name < right.name
        }
        return sorted.map { (pair: (name: String, value: String)) -> String in pair.name + "=" + pair.value }.joined(separator: "&")
    }

    /// URI-encodes as SigV4 asks: every byte but `A-Z a-z 0-9 - _ . ~` as `%XX`
    /// (upper-case hex); `/` kept in object paths.
    public static func encode(_ value: String, keepSlash: Bool) -> String {
        var result = ""
        result.reserveCapacity(value.utf8.count)
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                result.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepSlash:
                result.append("/")
            default:
                result += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return result
    }

    static func trim(_ value: String) -> String {
        value.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
    }

    /// `yyyyMMdd'T'HHmmss'Z'` and `yyyyMMdd`, UTC.
    static func timestamps(_ date: Date) -> (String, String) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC") ?? calendar.timeZone
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        func two(_ value: Int?) -> String { String(value ?? 0).leftPadded(to: 2) }
        let day = String(parts.year ?? 1970).leftPadded(to: 4) + two(parts.month) + two(parts.day)
        return (day + "T" + two(parts.hour) + two(parts.minute) + two(parts.second) + "Z", day)
    }
}

extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

extension S3Signer: RedactedDescription {}
