import Foundation
import Testing
@testable import WhisperShared

/// SigV4 against the examples AWS publishes for S3 ("Authenticating Requests: Using
/// Query Parameters" and "... Using the Authorization Header"): the example account's
/// keys, bucket `examplebucket` in us-east-1, 24 May 2013 00:00:00 UTC.
@Suite struct S3SignerTests {
    static let signer = S3Signer(
        location: S3Location(endpoint: "https://s3.amazonaws.com", region: "us-east-1", bucket: "examplebucket", pathStyle: false),
        accessKeyId: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    )
    static let date = Date(timeIntervalSince1970: 1_369_353_600)

    @Test func presignedGetMatchesThePublishedExample() {
        let url = Self.signer.presignedURL(method: "GET", key: "test.txt", expires: 86_400, date: Self.date)
        #expect(url == "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            + "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z"
            + "&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
            + "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404")
    }

    @Test func headerSignedGetWithRangeMatchesThePublishedExample() {
        let headers = Self.signer.signedHeaders(method: "GET", key: "test.txt", headers: ["Range": "bytes=0-9"], date: Self.date)
        let authorization = headers.first { $0.0 == "Authorization" }?.1
        #expect(authorization == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            + "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    @Test func headerSignedPutMatchesThePublishedExample() {
        // "Welcome to Amazon S3." as `test$file.text`, reduced redundancy.
        let headers = Self.signer.signedHeaders(
            method: "PUT", key: "test$file.text",
            headers: ["Date": "Fri, 24 May 2013 00:00:00 GMT", "x-amz-storage-class": "REDUCED_REDUNDANCY"],
            payloadHash: "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072", date: Self.date
        )
        let authorization = headers.first { $0.0 == "Authorization" }?.1
        #expect(authorization?.hasSuffix("Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd") == true)
    }

    @Test func presignedPutSignsLengthAndTypeAndPathStyleKeepsTheBucketInThePath() throws {
        let signer = S3Signer(
            location: S3Location(endpoint: "http://127.0.0.1:9000/", region: "us-east-1", bucket: "whisper", pathStyle: true),
            accessKeyId: "AK", secretAccessKey: "SK"
        )
        let url = signer.presignedURL(
            method: "PUT", key: "att/2026/11/0a1b.bin", expires: 900,
            headers: ["Content-Length": "1234", "Content-Type": "application/octet-stream"], date: Self.date
        )
        #expect(url.hasPrefix("http://127.0.0.1:9000/whisper/att/2026/11/0a1b.bin?"))
        #expect(url.contains("X-Amz-SignedHeaders=content-length%3Bcontent-type%3Bhost"))
        // Another length is another signature.
        let other = signer.presignedURL(
            method: "PUT", key: "att/2026/11/0a1b.bin", expires: 900,
            headers: ["Content-Length": "1235", "Content-Type": "application/octet-stream"], date: Self.date
        )
        #expect(other != url)
    }

    @Test func encodingFollowsSigV4() {
        #expect(S3Signer.encode("a b/c~d$é", keepSlash: true) == "a%20b/c~d%24%C3%A9")
        #expect(S3Signer.encode("a/b", keepSlash: false) == "a%2Fb")
    }

    /// A `ListObjectsV2` page as S3 documents it: keys in order, unescaped, and the
    /// token for the next page only while the listing is truncated.
    @Test func aListingGivesItsKeysAndTheNextPagesToken() {
        let page = S3Listing("""
            <?xml version="1.0" encoding="UTF-8"?>
            <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
              <Name>examplebucket</Name><Prefix>deletions/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>
              <IsTruncated>true</IsTruncated>
              <Contents><Key>deletions/WSP-AAAA-BBBB-CCCC</Key><Size>180</Size></Contents>
              <Contents><Key>deletions/a&amp;b&lt;c</Key><Size>3</Size></Contents>
              <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
            </ListBucketResult>
            """)
        #expect(page.keys == ["deletions/WSP-AAAA-BBBB-CCCC", "deletions/a&b<c"])
        #expect(page.isTruncated)
        #expect(page.nextContinuationToken == "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        let last = S3Listing("<ListBucketResult><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>")
        #expect(last.keys.isEmpty && !last.isTruncated)
    }
}
