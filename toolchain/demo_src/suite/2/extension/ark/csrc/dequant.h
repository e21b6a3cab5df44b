/* int4 dequantize (demo) */
static inline float ark_dequant_int4(unsigned char packed, int high, float scale) {
    int q = high ? (packed >> 4) : (packed & 0xF);
    return (float)(q - 8) * scale;
}
