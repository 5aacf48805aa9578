// Unicode text for corpora: UTF-8 checking and decoding, normalization, tokenizers.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tgc::data {

// Byte offset of the first byte that does not start a valid UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF are invalid), or npos when all is valid.
size_t findInvalidUtf8(std::string_view s);

// Code points of valid UTF-8 (an invalid byte decodes as U+FFFD and is skipped).
std::u32string decodeUtf8(std::string_view s);
void appendUtf8(std::string& out, char32_t c);
std::string encodeUtf8(std::u32string_view s);

// Python's str.isspace() (the whitespace Python's str.split() splits on).
bool isUnicodeSpace(char32_t c);

// Normalizes a line of valid UTF-8 for training: full-width ASCII variants (U+FF01..FF5E:
// ，。！？：；（） and full-width letters and digits) and the ideographic full stop and space
// become ASCII; curly quotes become straight ones; byte-order marks are dropped; runs of
// whitespace become one space; ends are trimmed. CJK characters are kept as they are.
std::string normalizeText(std::string_view s);

// ASCII letters to lowercase (other scripts are left alone).
std::string asciiLower(std::string_view s);

// Chinese as characters: one token per code point (a space is a token " ").
std::vector<std::string> tokenizeChars(std::string_view normalized);
std::string detokenizeChars(const std::vector<std::string>& tokens);

// English as words: runs of letters and digits, keeping an apostrophe or hyphen between
// letters ("don't", "forty-two") and a point or comma between digits ("3.5", "1,000");
// every other punctuation character is a token of its own ("Hi." → "Hi", ".").
std::vector<std::string> tokenizeWords(std::string_view normalized);
// Words joined by spaces, without the space before closing punctuation (. , ! ? ; : ) ] } %)
// or after opening brackets, so "Hi" "," "Tom" "." reads "Hi, Tom.".
std::string detokenizeWords(const std::vector<std::string>& tokens);

}  // namespace tgc::data
