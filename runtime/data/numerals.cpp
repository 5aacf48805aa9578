#include "runtime/data/numerals.h"

#include <fmt/format.h>

#include <array>
#include <stdexcept>
#include <unordered_set>

#include "runtime/data/rng.h"

namespace tgc::data {

namespace {

constexpr std::array<const char*, 10> kZhDigits = {"零", "一", "二", "三", "四",
                                                   "五", "六", "七", "八", "九"};
constexpr std::array<const char*, 4> kZhUnits = {"", "十", "百", "千"};

int64_t pow10(int k) {
  int64_t p = 1;
  for (int i = 0; i < k; ++i) p *= 10;
  return p;
}

void checkRange(int64_t n) {
  if (n < 0 || n > kMaxNumeral)
    throw std::invalid_argument(fmt::format("numeral {} out of range 0..{}", n, kMaxNumeral));
}

// One group of four digits, g in 1..9999. `first`: the group starts the number, so a
// leading 1 in the tens reads 十, not 一十.
void appendZhGroup(std::string& out, int64_t g, bool first, bool liang) {
  bool emitted = false, zeros = false;
  for (int pos = 3; pos >= 0; --pos) {
    const int64_t d = g / pow10(pos) % 10;
    if (d == 0) {
      zeros = emitted;  // zeros after a digit; read only if another digit follows
      continue;
    }
    if (zeros) out += "零";
    zeros = false;
    const bool bareTen = pos == 1 && d == 1 && first && !emitted;
    if (!bareTen) out += (d == 2 && pos == 3 && liang) ? "两" : kZhDigits[d];
    out += kZhUnits[pos];
    emitted = true;
  }
}

constexpr std::array<const char*, 20> kEnOnes = {
    "zero",    "one",     "two",       "three",    "four",     "five",    "six",
    "seven",   "eight",   "nine",      "ten",      "eleven",   "twelve",  "thirteen",
    "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
constexpr std::array<const char*, 10> kEnTens = {"",      "",      "twenty",  "thirty", "forty",
                                                 "fifty", "sixty", "seventy", "eighty", "ninety"};

// 1..999.
std::string englishUnder1000(int64_t n) {
  std::string out;
  if (n >= 100) {
    out = fmt::format("{} hundred", kEnOnes[n / 100]);
    n %= 100;
    if (n == 0) return out;
    out += ' ';
  }
  if (n < 20) return out + kEnOnes[n];
  out += kEnTens[n / 10];
  if (n % 10) out += fmt::format("-{}", kEnOnes[n % 10]);
  return out;
}

// Numbers with exactly `digits` decimal digits: [lo, lo + count).
int64_t lengthLow(int digits) { return digits == 1 ? 0 : pow10(digits - 1); }
int64_t lengthCount(int digits) { return digits == 1 ? 10 : 9 * pow10(digits - 1); }

// Splits `total` over digit lengths as evenly as the capacities allow (water filling;
// leftovers go to the longest lengths, which have the most numbers).
std::array<int64_t, kMaxNumeralDigits> allocate(int64_t total,
                                                const std::array<int64_t, kMaxNumeralDigits>& cap) {
  std::array<int64_t, kMaxNumeralDigits> got{};
  int64_t left = total;
  while (left > 0) {
    int open = 0;
    for (int i = 0; i < kMaxNumeralDigits; ++i) open += got[i] < cap[i];
    if (open == 0)
      throw std::invalid_argument(fmt::format(
          "numerals task: cannot hold out {} more numbers under the per-length cap", left));
    const int64_t share = left / open;
    if (share == 0) {
      for (int i = kMaxNumeralDigits - 1; i >= 0 && left > 0; --i)
        if (got[i] < cap[i]) ++got[i], --left;
      break;
    }
    for (int i = 0; i < kMaxNumeralDigits; ++i) {
      const int64_t take = std::min(share, cap[i] - got[i]);
      got[i] += take;
      left -= take;
    }
  }
  return got;
}

// Distinct numbers for one held-out split, added to `held`.
std::vector<NumeralExample> drawHeldOut(int64_t size,
                                        std::array<int64_t, kMaxNumeralDigits>& capLeft,
                                        std::unordered_set<int64_t>& held, Rng& rng) {
  const auto perLength = allocate(size, capLeft);
  std::vector<NumeralExample> out;
  out.reserve(static_cast<size_t>(size));
  for (int i = 0; i < kMaxNumeralDigits; ++i) {
    capLeft[i] -= perLength[i];
    const int digits = i + 1;
    for (int64_t k = 0; k < perLength[i]; ++k) {
      int64_t n;
      do {
        n = lengthLow(digits) + static_cast<int64_t>(rng.below(lengthCount(digits)));
      } while (held.count(n));
      held.insert(n);
      out.push_back(numeralExample(n, rng.next() & 1));
    }
  }
  shuffle(out, rng);  // mixed lengths, so any prefix is a fair sample
  return out;
}

}  // namespace

int numeralDigits(int64_t n) {
  int d = 1;
  while (n >= 10) n /= 10, ++d;
  return d;
}

std::string chineseNumeral(int64_t n, bool liang) {
  checkRange(n);
  if (n == 0) return "零";
  const int64_t high = n / 10000, low = n % 10000;
  std::string out;
  if (high > 0) {
    if (high == 2 && liang)
      out += "两";
    else
      appendZhGroup(out, high, true, liang);
    out += "万";
    if (low == 0) return out;
    if (low < 1000) out += "零";
  }
  appendZhGroup(out, low, high == 0, liang);
  return out;
}

std::string englishNumber(int64_t n) {
  checkRange(n);
  if (n == 0) return "zero";
  std::string out;
  auto add = [&](int64_t part, const char* scale) {
    if (part == 0) return;
    if (!out.empty()) out += ' ';
    out += englishUnder1000(part);
    if (*scale) out += fmt::format(" {}", scale);
  };
  add(n / 1'000'000, "million");
  add(n / 1000 % 1000, "thousand");
  add(n % 1000, "");
  return out;
}

NumeralExample numeralExample(int64_t n, bool liang) {
  return {n, chineseNumeral(n, liang), englishNumber(n)};
}

NumeralsSplits makeNumeralsTask(const NumeralsOptions& o) {
  if (o.trainSize < 0 || o.validSize < 0 || o.testSize < 0)
    throw std::invalid_argument("numerals task: negative split size");
  if (!(o.maxHeldOutFraction >= 0 && o.maxHeldOutFraction < 1))
    throw std::invalid_argument("numerals task: maxHeldOutFraction must be in [0, 1)");
  std::array<int64_t, kMaxNumeralDigits> cap{};
  for (int i = 0; i < kMaxNumeralDigits; ++i)
    cap[i] = static_cast<int64_t>(static_cast<double>(lengthCount(i + 1)) * o.maxHeldOutFraction);

  NumeralsSplits s;
  std::unordered_set<int64_t> held;
  Rng heldRng(mixSeed(o.seed, 1));
  s.test = drawHeldOut(o.testSize, cap, held, heldRng);
  s.valid = drawHeldOut(o.validSize, cap, held, heldRng);

  Rng trainRng(mixSeed(o.seed, 2));
  s.train.reserve(static_cast<size_t>(o.trainSize));
  while (static_cast<int64_t>(s.train.size()) < o.trainSize) {
    const int digits = 1 + static_cast<int>(trainRng.below(kMaxNumeralDigits));
    const int64_t n = lengthLow(digits) + static_cast<int64_t>(trainRng.below(lengthCount(digits)));
    const bool liang = trainRng.next() & 1;
    if (held.count(n)) continue;  // 1 in 10 draws at most (the cap), so this ends quickly
    s.train.push_back(numeralExample(n, liang));
  }
  return s;
}

}  // namespace tgc::data
