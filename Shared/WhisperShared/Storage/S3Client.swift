import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1

/// The object store's settings, shared by attachment-signer and gc-worker:
/// `WHISPER_S3_ENDPOINT`, `WHISPER_S3_REGION`, `WHISPER_S3_BUCKET`,
/// `WHISPER_S3_ACCESS_KEY_ID`, `WHISPER_S3_SECRET_ACCESS_KEY`, `WHISPER_S3_PATH_STYLE`,
/// and `WHISPER_S3_PUBLIC_ENDPOINT` (the address clients use, when it differs).
public struct S3Settings: Sendable {
    public var location: S3Location
    /// The same store as clients reach it (the URLs handed out are signed for it).
    public var publicLocation: S3Location
    public var accessKeyId: String
    public var secretAccessKey: String

    public init(location: S3Location, publicLocation: S3Location? = nil, accessKeyId: String, secretAccessKey: String) {
        self.location = location
        self.publicLocation = publicLocation ?? location
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
    }

    public init(from settings: SettingsReader) {
        let endpoint = settings.requiredString("whisper.s3.endpoint")
        if !endpoint.isEmpty, !(endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://")) {
            settings.reject("whisper.s3.endpoint", because: "must be an http:// or https:// URL")
        }
        let region = settings.string("whisper.s3.region", default: "us-east-1")
        let bucket = settings.requiredString("whisper.s3.bucket")
        let pathStyle = settings.bool("whisper.s3.path.style", default: false)
        location = S3Location(endpoint: endpoint, region: region, bucket: bucket, pathStyle: pathStyle)
        let publicEndpoint = settings.string("whisper.s3.public.endpoint", default: endpoint)
        publicLocation = S3Location(endpoint: publicEndpoint, region: region, bucket: bucket, pathStyle: pathStyle)
        accessKeyId = settings.requiredString("whisper.s3.access.key.id", secret: true)
        secretAccessKey = settings.requiredString("whisper.s3.secret.access.key", secret: true)
    }

    /// Signs what the services send the store themselves.
    public var signer: S3Signer { S3Signer(location: location, accessKeyId: accessKeyId, secretAccessKey: secretAccessKey) }
    /// Signs the URLs handed to clients.
    public var publicSigner: S3Signer { S3Signer(location: publicLocation, accessKeyId: accessKeyId, secretAccessKey: secretAccessKey) }
}

/// The few object-store calls the services make themselves, signed with SigV4.
public struct S3Client: Sendable {
    public let signer: S3Signer
    let timeout: TimeAmount = .seconds(15)

    public init(signer: S3Signer) {
        self.signer = signer
    }

    /// What the store holds under a key.
    public struct ObjectInfo: Sendable, Equatable {
        public var size: Int64
        public var contentType: String?
    }

    /// `HEAD` of an object: nil when there is none.
    public func head(_ key: String) async throws -> ObjectInfo? {
        let response = try await send("HEAD", key: key)
        switch response.status {
        case 200:
            let size = response.headers.first(name: "content-length").flatMap { Int64($0) } ?? -1
            return ObjectInfo(size: size, contentType: response.headers.first(name: "content-type"))
        case 404:
            return nil
        default:
            throw S3Error(operation: "HEAD", status: response.status)
        }
    }

    /// Deletes an object; a missing one counts as deleted.
    public func delete(_ key: String) async throws {
        let response = try await send("DELETE", key: key)
        guard (200..<300).contains(response.status) || response.status == 404 else {
            throw S3Error(operation: "DELETE", status: response.status)
        }
    }

    /// Creates the bucket unless it is there (for local stores set up by scripts/up and tests).
    public func ensureBucket() async throws {
        let response = try await send("PUT", key: "")
        guard (200..<300).contains(response.status) || response.status == 409 else {
            throw S3Error(operation: "create bucket", status: response.status)
        }
    }

    /// `PUT` of a small object.
    public func put(_ key: String, body: [UInt8], contentType: String) async throws {
        let hash = Array(SHA256.hash(data: body)).hexString
        let response = try await send("PUT", key: key, headers: ["Content-Type": contentType, "Content-Length": String(body.count)], body: body, payloadHash: hash)
        guard (200..<300).contains(response.status) else { throw S3Error(operation: "PUT", status: response.status) }
    }

    /// `GET` of a small object: its bytes (at most `limit`), or nil when there is none.
    public func get(_ key: String, limit: Int = 64 << 10) async throws -> [UInt8]? {
        let response = try await send("GET", key: key, bodyLimit: limit)
        switch response.status {
        case 200: return response.body
        case 404: return nil
        default: throw S3Error(operation: "GET", status: response.status)
        }
    }

    /// One page of the keys under `prefix` (`ListObjectsV2`, up to 1,000 keys, in key
    /// order), and the token that asks for the next page (nil after the last).
    public func list(prefix: String, continuation: String? = nil) async throws -> (keys: [String], next: String?) {
        var query = [("list-type", "2"), ("prefix", prefix)]
        if let continuation { query.append(("continuation-token", continuation)) }
        let response = try await send("GET", key: "", query: query, bodyLimit: 4 << 20)
        guard response.status == 200 else { throw S3Error(operation: "LIST", status: response.status) }
        let listing = S3Listing(String(decoding: response.body, as: UTF8.self))
        return (listing.keys, listing.isTruncated ? listing.nextContinuationToken : nil)
    }

    private func send(
        _ method: String, key: String, query: [(String, String)] = [], headers: [String: String] = [:], body: [UInt8]? = nil,
        payloadHash: String = S3Signer.emptyPayloadHash, bodyLimit: Int = 1 << 20
    ) async throws -> (status: Int, headers: HTTPHeaders, body: [UInt8]) {
        var request = HTTPClientRequest(url: signer.location.url(for: key, query: S3Signer.canonicalQuery(query)))
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in signer.signedHeaders(method: method, key: key, query: query, headers: headers, payloadHash: payloadHash, date: Date()) {
            request.headers.add(name: name, value: value)
        }
        for (name, value) in headers { request.headers.replaceOrAdd(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: timeout)
        // The body is read whole (an error document, at most, for most calls) so the
        // connection is reused.
        let bytes = try await response.body.collect(upTo: bodyLimit)
        return (Int(response.status.code), response.headers, Array(bytes.readableBytesView))
    }
}

/// The parts of a `ListObjectsV2` answer the services read: the keys, and whether and how
/// to ask for more. The document is the store's; element text is unescaped.
struct S3Listing {
    var keys: [String] = []
    var isTruncated = false
    var nextContinuationToken: String?

    init(_ document: String) {
        keys = Self.texts(of: "Key", in: document)
        isTruncated = Self.texts(of: "IsTruncated", in: document).first == "true"
        nextContinuationToken = Self.texts(of: "NextContinuationToken", in: document).first
    }

    /// The text of every `<name>...</name>` element, in order.
    static func texts(of name: String, in document: String) -> [String] {
        let open = "<\(name)>", close = "</\(name)>"
        var texts: [String] = []
        var rest = document[...]
        while let start = rest.range(of: open), let end = rest.range(of: close, range: start.upperBound..<rest.endIndex) {
            texts.append(unescaped(String(rest[start.upperBound..<end.lowerBound])))
            rest = rest[end.upperBound...]
        }
        return texts
    }

    static func unescaped(_ text: String) -> String {
        guard text.contains("&") else { return text }
        return text.replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&apos;", with: "'")
            .replacingOccurrences(of: "&amp;", with: "&")
    }
}

public struct S3Error: Error, CustomStringConvertible {
    public var operation: String
    public var status: Int
    public var description: String { "object store \(operation) answered \(status)" }
}

extension S3Settings: RedactedDescription {}
extension S3Client: RedactedDescription {}
