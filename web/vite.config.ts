import { resolve } from 'node:path';
import { defineConfig } from 'vite';

// Pages: the dashboard (index.html), the trading page (trade.html) and the day-trading
// page (daytrading.html). `npm run dev` proxies the API to a running `bourse demo` on
// 127.0.0.1:8080.
export default defineConfig({
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    rollupOptions: {
      input: {
        dashboard: resolve(__dirname, 'index.html'),
        trade: resolve(__dirname, 'trade.html'),
        daytrading: resolve(__dirname, 'daytrading.html'),
      },
    },
  },
  server: {
    proxy: {
      '/v1': { target: 'http://127.0.0.1:8080', ws: true },
      '/openapi.json': 'http://127.0.0.1:8080',
    },
  },
});
